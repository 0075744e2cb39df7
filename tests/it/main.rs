mod cli;
mod crash;
mod helpers;
mod receive;
mod storage;
