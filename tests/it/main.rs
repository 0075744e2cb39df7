mod helpers;
mod receive;
