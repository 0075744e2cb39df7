mod cli;
mod crash;
mod deliver;
mod deliver_crash;
mod helpers;
mod receive;
mod storage;
