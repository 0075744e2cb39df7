//! How fast the disk makes appended bytes durable.

use std::fmt;
use std::fs::OpenOptions;
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde_json::{Value, json};

/// Append sizes, from one WAL frame to a large group's worth.
const SIZES: [usize; 4] = [4 << 10, 64 << 10, 256 << 10, 1 << 20];

pub struct Figure {
    size: usize,
    mb_per_sec: f64,
    sync_p50: Duration,
    sync_p90: Duration,
}

impl fmt::Display for Figure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "disk: appends of {:>4} KiB, each fdatasynced: {:.0} MB/s, fdatasync p50 {:.2} ms p90 {:.2} ms",
            self.size >> 10,
            self.mb_per_sec,
            ms(self.sync_p50),
            ms(self.sync_p90)
        )
    }
}

impl Figure {
    pub fn json(&self) -> Value {
        json!({
            "floor": "disk",
            "append_kib": self.size >> 10,
            "mb_per_sec": self.mb_per_sec,
            "fdatasync_p50_ms": ms(self.sync_p50),
            "fdatasync_p90_ms": ms(self.sync_p90),
        })
    }
}

/// Writes `bytes` at each of [`SIZES`] (at least 20 appends) into a
/// temporary file in `dir`.
pub fn measure(dir: &Path, bytes: u64) -> Result<Vec<Figure>> {
    let scratch = tempfile::Builder::new()
        .prefix("hookbox-floor-disk")
        .tempdir_in(dir)
        .with_context(|| format!("making a scratch directory in {}", dir.display()))?;
    let path = scratch.path().join("appends");
    let mut figures = Vec::new();
    for size in SIZES {
        let mut file = OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(true)
            .open(&path)
            .with_context(|| format!("creating {}", path.display()))?;
        // Not zeros: a compressing or deduplicating disk would flatter them.
        let chunk: Vec<u8> = (0..size).map(|_| fastrand::u8(..)).collect();
        let appends = (bytes / size as u64).max(20);
        let mut syncs = Vec::with_capacity(appends as usize);
        let started = Instant::now();
        for _ in 0..appends {
            file.write_all(&chunk).context("appending")?;
            let t = Instant::now();
            file.sync_data().context("fdatasync")?;
            syncs.push(t.elapsed());
        }
        let took = started.elapsed().as_secs_f64();
        syncs.sort();
        figures.push(Figure {
            size,
            mb_per_sec: (appends * size as u64) as f64 / took / 1e6,
            sync_p50: syncs[syncs.len() / 2],
            sync_p90: syncs[syncs.len() * 9 / 10],
        });
    }
    Ok(figures)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_size_is_measured_and_the_scratch_file_removed() {
        let dir = tempfile::tempdir().unwrap();
        let figures = measure(dir.path(), 1 << 20).unwrap();
        let sizes: Vec<usize> = figures.iter().map(|f| f.size).collect();
        assert_eq!(sizes, SIZES);
        for f in &figures {
            assert!(f.mb_per_sec > 0.0 && f.sync_p50 <= f.sync_p90, "{f}");
        }
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
