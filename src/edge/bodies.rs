//! Memory for request bodies: one budget for the process, and the share of
//! it one client address may hold.
//!
//! A body is read whole before its signature can be checked, so bodies in
//! flight are memory anyone can ask for. Each is charged as its bytes
//! arrive, never for what `Content-Length` only announces: a connection
//! that declares 25 MiB and then sends nothing holds nothing, so idle
//! uploads cannot spend the budget that valid deliveries need. Charges
//! count against
//!
//! * the process's budget of [`BODY_MEMORY`] (256 MiB), shared by every
//!   body being read or waiting for its commit;
//! * the client's share of it: at most `edge.max_client_body_bytes` held
//!   at once (never less than the largest body a source accepts, so every
//!   body the limits allow can be read), and at most
//!   `edge.max_client_bodies` bodies being read at once, per address (IPv6
//!   per /64, as the failure limit counts).
//!
//! A request that would go over any of them is refused ([`Refused`];
//! `crate::ingress::receive` answers 503 with `Retry-After`, which every provider
//! retries). A charge is given back when its request ends, stored or
//! refused. (The config caps every body limit at the budget; a body
//! charged past it would be charged the whole budget, a clamp kept in case
//! that cap moves.)
//!
//! Memory is bounded: an address is remembered only while it holds a
//! charge, so the table never outgrows the connections being served.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::limit::key;
use crate::telemetry::metrics::EdgeMetrics;

/// Bytes of request bodies the process holds at most.
pub const BODY_MEMORY: u64 = 256 * 1024 * 1024;

/// The budget's unit: a semaphore counts `u32` permits, too few for bytes.
const UNIT: u64 = 1024;

/// Why a body was not charged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// The process's budget is spent.
    Memory,
    /// The client holds its share of bytes.
    ClientBytes,
    /// The client has its share of bodies being read.
    ClientBodies,
}

impl Refused {
    /// The metrics label.
    pub fn reason(self) -> &'static str {
        match self {
            Refused::Memory => "body_memory",
            Refused::ClientBytes => "client_body_bytes",
            Refused::ClientBodies => "client_bodies",
        }
    }
}

/// What one address holds now.
#[derive(Debug, Default)]
struct Held {
    bytes: u64,
    reading: u32,
}

/// The process's body budget and each address's share; one per process.
#[derive(Debug)]
pub struct Bodies {
    /// In [`UNIT`]s.
    memory: Arc<Semaphore>,
    max_client_bytes: u64,
    max_client_bodies: u32,
    clients: Mutex<HashMap<IpAddr, Held>>,
    metrics: EdgeMetrics,
}

/// Units of the budget `bytes` of one body take.
fn units(bytes: u64) -> u64 {
    bytes.min(BODY_MEMORY).div_ceil(UNIT)
}

impl Bodies {
    pub fn new(max_client_bytes: u64, max_client_bodies: u32, metrics: EdgeMetrics) -> Self {
        let units = usize::try_from(units(BODY_MEMORY)).unwrap_or(usize::MAX);
        Bodies {
            memory: Arc::new(Semaphore::new(units)),
            max_client_bytes,
            max_client_bodies,
            clients: Mutex::new(HashMap::new()),
            metrics,
        }
    }

    /// Starts reading a body from `client`: counts it among the address's
    /// bodies being read, with nothing charged yet.
    pub fn start(self: &Arc<Self>, client: IpAddr) -> Result<Charge, Refused> {
        let client = key(client);
        let mut clients = self.lock();
        let held = clients.entry(client).or_default();
        if held.reading >= self.max_client_bodies {
            return Err(Refused::ClientBodies);
        }
        held.reading += 1;
        drop(clients);
        self.metrics.bodies_reading(1);
        Ok(Charge {
            bodies: self.clone(),
            client,
            bytes: 0,
            memory: None,
            reading: true,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<IpAddr, Held>> {
        // Every update leaves the map consistent before anything can panic.
        self.clients.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// One body's charge, given back on drop.
#[derive(Debug)]
pub struct Charge {
    bodies: Arc<Bodies>,
    /// The address as counted ([`key`]).
    client: IpAddr,
    /// Bytes that arrived, all charged to the client.
    bytes: u64,
    memory: Option<OwnedSemaphorePermit>,
    /// Still among the client's bodies being read.
    reading: bool,
}

impl Charge {
    /// Charges `n` bytes that just arrived. On `Err` nothing more is
    /// charged; what was stays until the charge is dropped.
    pub fn add(&mut self, n: usize) -> Result<(), Refused> {
        let n = u64::try_from(n).unwrap_or(u64::MAX);
        let total = self.bytes.saturating_add(n);
        let more = units(total) - units(self.bytes);
        let permit = match more {
            0 => None,
            more => {
                let more = u32::try_from(more).map_err(|_| Refused::Memory)?;
                let permit = self.bodies.memory.clone().try_acquire_many_owned(more);
                Some(permit.map_err(|_| Refused::Memory)?)
            }
        };
        {
            let mut clients = self.bodies.lock();
            let held = clients.entry(self.client).or_default();
            if held.bytes.saturating_add(n) > self.bodies.max_client_bytes {
                return Err(Refused::ClientBytes);
            }
            held.bytes += n;
        }
        self.bytes = total;
        if let Some(more) = permit {
            match self.memory.as_mut() {
                Some(held) => held.merge(more),
                None => self.memory = Some(more),
            }
        }
        self.bodies
            .metrics
            .body_bytes(i64::try_from(n).unwrap_or(i64::MAX));
        Ok(())
    }

    /// The body is read: it no longer counts among the client's bodies
    /// being read, but its bytes stay charged until the charge is dropped.
    pub fn read(&mut self) {
        if !std::mem::take(&mut self.reading) {
            return;
        }
        if let Some(held) = self.bodies.lock().get_mut(&self.client) {
            held.reading = held.reading.saturating_sub(1);
        }
        self.bodies.metrics.bodies_reading(-1);
    }

    /// Bytes charged so far.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.read();
        let mut clients = self.bodies.lock();
        if let Some(held) = clients.get_mut(&self.client) {
            held.bytes = held.bytes.saturating_sub(self.bytes);
            if held.bytes == 0 && held.reading == 0 {
                clients.remove(&self.client);
            }
        }
        drop(clients);
        self.bodies
            .metrics
            .body_bytes(-i64::try_from(self.bytes).unwrap_or(i64::MAX));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bodies(max_client_bytes: u64, max_client_bodies: u32) -> Arc<Bodies> {
        Arc::new(Bodies::new(
            max_client_bytes,
            max_client_bodies,
            EdgeMetrics::default(),
        ))
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    const MIB: usize = 1 << 20;

    #[test]
    fn a_body_is_charged_as_its_bytes_arrive_not_as_it_declares() {
        let b = bodies(BODY_MEMORY, 100);
        // What the idle-upload attack declared: eleven bodies that sum to
        // the whole budget. Nothing arrived, so nothing is charged.
        let idle: Vec<_> = (0..11)
            .map(|_| b.start(ip("198.51.100.6")).unwrap())
            .collect();
        assert_eq!(b.memory.available_permits(), 256 * 1024);
        let mut valid = b.start(ip("203.0.113.9")).unwrap();
        valid.add(2048).unwrap();
        valid.add(1).unwrap();
        assert_eq!(valid.bytes(), 2049);
        assert_eq!(b.memory.available_permits(), 256 * 1024 - 3);
        drop(valid);
        assert_eq!(b.memory.available_permits(), 256 * 1024);
        drop(idle);
        assert!(b.lock().is_empty(), "nothing is remembered once released");
    }

    #[test]
    fn the_process_budget_is_shared_and_given_back_on_drop() {
        let b = bodies(BODY_MEMORY, 100);
        let mut held = Vec::new();
        for i in 0..4u8 {
            let mut c = b.start(IpAddr::from([198, 51, 100, i])).unwrap();
            c.add(64 * MIB).unwrap();
            held.push(c);
        }
        let mut late = b.start(ip("203.0.113.9")).unwrap();
        assert_eq!(late.add(1), Err(Refused::Memory));
        drop(held.pop());
        late.add(MIB).unwrap();
    }

    #[test]
    fn one_address_holds_at_most_its_share_of_bytes_and_bodies() {
        let b = bodies(10 * MIB as u64, 2);
        let mut first = b.start(ip("198.51.100.6")).unwrap();
        first.add(6 * MIB).unwrap();
        let mut second = b.start(ip("198.51.100.6")).unwrap();
        assert_eq!(second.add(5 * MIB), Err(Refused::ClientBytes));
        second.add(4 * MIB).unwrap();
        assert_eq!(
            b.start(ip("198.51.100.6")).unwrap_err(),
            Refused::ClientBodies
        );
        // Another address is not held back.
        let mut other = b.start(ip("203.0.113.9")).unwrap();
        other.add(10 * MIB).unwrap();
        // A body that is read no longer counts among those being read; its
        // bytes do until it is dropped.
        first.read();
        let mut third = b.start(ip("198.51.100.6")).unwrap();
        assert_eq!(third.add(1), Err(Refused::ClientBytes));
        drop(first);
        third.add(6 * MIB).unwrap();
    }

    #[test]
    fn ipv6_addresses_share_their_64() {
        let b = bodies(MIB as u64, 1);
        let _one = b.start(ip("2001:db8:1:2::1")).unwrap();
        assert_eq!(
            b.start(ip("2001:db8:1:2::ffff")).unwrap_err(),
            Refused::ClientBodies
        );
        assert!(b.start(ip("2001:db8:1:3::1")).is_ok());
    }

    #[test]
    fn a_body_above_the_whole_budget_is_charged_the_whole_budget() {
        let b = bodies(u64::MAX, 10);
        let mut huge = b.start(ip("198.51.100.6")).unwrap();
        huge.add(200 * MIB).unwrap();
        huge.add(100 * MIB).unwrap();
        assert_eq!(b.memory.available_permits(), 0);
        let mut other = b.start(ip("203.0.113.9")).unwrap();
        assert_eq!(other.add(1), Err(Refused::Memory));
        drop(huge);
        other.add(1).unwrap();
    }
}
