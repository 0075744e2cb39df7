//! Long-polling consumers of the bench's pull destination: each holds a
//! take open (`max=10`, `wait=20s`), acks everything it gets and asks
//! again, until stopped.
//!
//! They run on a thread of their own with a current-thread runtime, so
//! nothing else the load generator does delays their clock readings: the
//! time an answer arrived is comparable with the time a 202 came back.

use anyhow::{Context, Result};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tokio::sync::watch;

use super::client::{Client, Taken};
use super::{ACK_TIMEOUT, POLL, TAKE_MAX, TAKE_WAIT};
use crate::load::Receipts;

/// What the consumers saw, all together.
#[derive(Default)]
pub struct Taking {
    /// When the first answer holding each delivery id arrived.
    pub first: HashMap<String, Instant>,
    /// Events in all answers (more than `first` holds when one is taken
    /// twice).
    pub events: u64,
    /// Takes answered 200, and of those the ones with no event.
    pub takes: u64,
    pub empty_takes: u64,
    pub acked: u64,
    pub stale: u64,
    /// Events whose ack came back (or failed): all of `events` once no ack
    /// is under way.
    pub ack_done: u64,
    /// Takes answered with another status; takes or acks that failed.
    pub other_status: u64,
    pub errors: u64,
    pub reconnects: u64,
    pub samples: Vec<String>,
}

impl Taking {
    fn sample(&mut self, what: String) {
        if self.samples.len() < 5 {
            self.samples.push(what);
        }
    }

    /// Takes that came back, whatever their answer (each is asked again).
    pub fn answered(&self) -> u64 {
        self.takes + self.other_status + self.errors
    }

    /// Events handed out more than once.
    pub fn twice(&self) -> u64 {
        self.events - self.first.len() as u64
    }
}

/// `n` consumers on their own thread.
pub struct Consumers {
    taking: Arc<Mutex<Taking>>,
    /// Takes sent and not answered yet.
    waiting: Arc<AtomicU64>,
    stop: watch::Sender<bool>,
    thread: Option<JoinHandle<()>>,
}

impl Consumers {
    pub fn start(addr: SocketAddr, n: u32) -> Result<Consumers> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("building the consumers' runtime")?;
        let clients = (0..n)
            .map(|_| super::client(addr))
            .collect::<Result<Vec<_>>>()?;
        let taking = Arc::new(Mutex::new(Taking::default()));
        let waiting = Arc::new(AtomicU64::new(0));
        let (stop, stopped) = watch::channel(false);
        let (record, gauge) = (Arc::clone(&taking), Arc::clone(&waiting));
        let thread = std::thread::Builder::new()
            .name("pull-consumers".to_owned())
            .spawn(move || {
                runtime.block_on(async move {
                    let tasks: Vec<_> = clients
                        .into_iter()
                        .map(|client| {
                            tokio::spawn(consume(
                                client,
                                Arc::clone(&record),
                                Arc::clone(&gauge),
                                stopped.clone(),
                            ))
                        })
                        .collect();
                    for task in tasks {
                        let _ = task.await;
                    }
                });
                // Dropping the runtime closes every connection.
            })
            .context("starting the consumers' thread")?;
        Ok(Consumers {
            taking,
            waiting,
            stop,
            thread: Some(thread),
        })
    }

    /// Takes waiting for an answer right now.
    pub fn waiting(&self) -> u64 {
        self.waiting.load(Ordering::Relaxed)
    }

    /// Takes answered so far.
    pub fn answered(&self) -> u64 {
        lock(&self.taking).answered()
    }

    /// Whether the consumers have taken every id in `receipts` and no ack
    /// is under way.
    pub fn has_all(&self, receipts: &Receipts) -> bool {
        let taking = lock(&self.taking);
        taking.ack_done == taking.events
            && taking.first.len() >= receipts.len()
            && receipts.with_map(|accepted| accepted.keys().all(|id| taking.first.contains_key(id)))
    }

    /// Waits up to `cap` for [`Consumers::has_all`]; returns whether it
    /// came.
    pub async fn wait_for(&self, receipts: &Receipts, cap: Duration) -> bool {
        let until = Instant::now() + cap;
        loop {
            if self.has_all(receipts) {
                return true;
            }
            if Instant::now() >= until {
                return false;
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Takes and acks that failed so far, and takes answered with a status
    /// other than 200.
    pub fn failures(&self) -> u64 {
        let taking = lock(&self.taking);
        taking.errors + taking.other_status
    }

    /// Stops every consumer (each after an ack under way; a waiting take is
    /// dropped with its connection) and returns what they saw.
    pub fn stop(mut self) -> Taking {
        let _ = self.stop.send(true);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        std::mem::take(&mut *lock(&self.taking))
    }
}

impl Drop for Consumers {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn lock(taking: &Mutex<Taking>) -> std::sync::MutexGuard<'_, Taking> {
    taking.lock().unwrap_or_else(|e| e.into_inner())
}

/// One consumer: take, note, ack, again, until `stopped`.
async fn consume(
    mut client: Client,
    record: Arc<Mutex<Taking>>,
    waiting: Arc<AtomicU64>,
    mut stopped: watch::Receiver<bool>,
) {
    loop {
        waiting.fetch_add(1, Ordering::Relaxed);
        let taken = tokio::select! {
            _ = stopped.changed() => break,
            taken = client.take(TAKE_MAX, TAKE_WAIT) => taken,
        };
        let at = Instant::now();
        waiting.fetch_sub(1, Ordering::Relaxed);
        match taken {
            Ok((hyper::StatusCode::OK, events)) => settle(&mut client, &record, events, at).await,
            failed => {
                {
                    let mut r = lock(&record);
                    match failed {
                        Ok((status, _)) => {
                            r.other_status += 1;
                            r.sample(format!("take answered {status}"));
                        }
                        Err(e) => {
                            r.errors += 1;
                            r.sample(format!("take: {e:#}"));
                        }
                    }
                }
                tokio::time::sleep(POLL).await;
            }
        }
    }
    waiting.fetch_sub(1, Ordering::Relaxed);
    lock(&record).reconnects += client.reconnects;
}

/// Records one take's events (its answer arrived at `at`) and acks them.
async fn settle(client: &mut Client, record: &Mutex<Taking>, events: Vec<Taken>, at: Instant) {
    {
        let mut r = lock(record);
        r.takes += 1;
        r.empty_takes += u64::from(events.is_empty());
        r.events += events.len() as u64;
        for e in &events {
            r.first.entry(e.delivery_id.clone()).or_insert(at);
        }
    }
    if events.is_empty() {
        return;
    }
    let leases: Vec<String> = events.into_iter().map(|e| e.lease).collect();
    let acked = tokio::time::timeout(ACK_TIMEOUT, client.ack(&leases)).await;
    let mut r = lock(record);
    r.ack_done += leases.len() as u64;
    match acked {
        Ok(Ok(a)) => {
            r.acked += a.acked;
            r.stale += a.stale;
        }
        Ok(Err(e)) => {
            r.errors += 1;
            r.sample(format!("ack: {e:#}"));
        }
        Err(_) => {
            r.errors += 1;
            r.sample(format!("ack: no answer within {ACK_TIMEOUT:?}"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answered_counts_every_take_that_came_back_and_twice_the_repeats() {
        let mut t = Taking {
            takes: 3,
            other_status: 1,
            errors: 2,
            events: 5,
            ..Taking::default()
        };
        for id in ["a", "b", "c", "d"] {
            t.first.insert(id.to_owned(), Instant::now());
        }
        assert_eq!(t.answered(), 6);
        assert_eq!(t.twice(), 1);
    }
}
