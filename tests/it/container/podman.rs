//! Podman on these machines, with everything it keeps under
//! `target/container/`: the image store, and in it the base image made
//! with `debootstrap --variant=minbase` and imported as
//! `debian:bookworm-slim` (no registry is reachable here), once a month.
//!
//! What the VMs need is in the `containers.conf` written here, which
//! `CONTAINERS_CONF` points every podman (and podman-compose) at: `runc`
//! and the cgroupfs manager (cgroups run in hybrid mode, which crun
//! refuses) and `default_ulimits = []` (setrlimit is refused here).

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime};

use crate::helpers::{PATIENCE, debian_tools, outside_tool};

/// The runtime stage's base, under the name the Dockerfile gives it.
const BASE: &str = "docker.io/library/debian:bookworm-slim";
/// The image built from the project's Dockerfile.
pub const IMAGE: &str = "localhost/hookbox-test:latest";
const MIRROR: &str = "http://deb.debian.org/debian";

pub struct Podman {
    conf: PathBuf,
    storage_conf: PathBuf,
}

/// The repository: the build context, as a user's `docker build .`.
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Podman with the image built, or `None` (after one line saying why)
/// when a tool or the release binary is missing outside CI.
pub fn podman() -> Option<&'static Podman> {
    static PODMAN: OnceLock<Option<Podman>> = OnceLock::new();
    PODMAN.get_or_init(Podman::prepare).as_ref()
}

impl Podman {
    fn prepare() -> Option<Podman> {
        if !debian_tools(
            &["podman", "runc", "debootstrap"],
            "podman runc debootstrap",
        ) || !outside_tool(
            "root (podman here runs containers as root)",
            is_root(),
            "run the suite as root, as .ci/run does",
        ) || !outside_tool(
            "an up-to-date target/release/hookbox",
            release_binary_is_fresh(),
            "cargo build --release --locked -p hookbox",
        ) {
            return None;
        }
        let month = time::OffsetDateTime::now_utc();
        let key = format!("bookworm-{}-{:02}", month.year(), month.month() as u8);
        let top = repo().join("target/container");
        // Last month's store: its base image is out of date.
        if let Ok(entries) = std::fs::read_dir(&top) {
            for entry in entries.flatten() {
                if entry.file_name() != key.as_str() {
                    let _ = std::fs::remove_dir_all(entry.path());
                }
            }
        }
        let dir = top.join(key);
        std::fs::create_dir_all(&dir).unwrap();
        let conf = dir.join("containers.conf");
        std::fs::write(
            &conf,
            format!(
                "[containers]\ndefault_ulimits = []\n\n[engine]\nruntime = \"runc\"\n\
                 cgroup_manager = \"cgroupfs\"\ntmp_dir = {:?}\n\n\
                 [network]\nnetwork_config_dir = {:?}\n",
                dir.join("tmp").display().to_string(),
                dir.join("networks").display().to_string()
            ),
        )
        .unwrap();
        let storage_conf = dir.join("storage.conf");
        std::fs::write(
            &storage_conf,
            format!(
                "[storage]\ndriver = \"overlay\"\ngraphroot = {:?}\nrunroot = {:?}\n",
                dir.join("storage").display().to_string(),
                dir.join("run").display().to_string()
            ),
        )
        .unwrap();
        let podman = Podman { conf, storage_conf };
        if !podman
            .cmd()
            .args(["image", "exists", BASE])
            .status()
            .unwrap()
            .success()
        {
            podman.import_base(&dir);
        }
        podman.ok(&[
            "build",
            "--pull=never",
            // Docker's format keeps HEALTHCHECK (OCI's has no such field).
            "--format",
            "docker",
            "--build-arg",
            "HOOKBOX_BINARY=prebuilt",
            "-t",
            IMAGE,
            &repo().display().to_string(),
        ]);
        Some(podman)
    }

    /// A Debian 12 minbase from Debian's archive, about 30 s on a fresh
    /// machine.
    fn import_base(&self, dir: &Path) {
        let started = Instant::now();
        let work = tempfile::tempdir_in(dir).unwrap();
        let rootfs = work.path().join("rootfs");
        let out = Command::new("debootstrap")
            .args(["--variant=minbase", "bookworm"])
            .arg(&rootfs)
            .arg(MIRROR)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "debootstrap: {}",
            crate::helpers::text(&out)
        );
        let mut tar = Command::new("tar")
            .arg("-C")
            .arg(&rootfs)
            .args(["-c", "."])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let import = self
            .cmd()
            .args(["import", "-", BASE])
            .stdin(tar.stdout.take().unwrap())
            .output()
            .unwrap();
        assert!(tar.wait().unwrap().success());
        assert!(
            import.status.success(),
            "podman import: {}",
            crate::helpers::text(&import)
        );
        eprintln!("made {BASE} with debootstrap in {:?}", started.elapsed());
    }

    /// `podman` with this store and configuration.
    pub fn cmd(&self) -> Command {
        let mut cmd = Command::new("podman");
        self.env(&mut cmd);
        cmd
    }

    /// Points `cmd` (podman or podman-compose) at this store and
    /// configuration.
    pub fn env<'c>(&self, cmd: &'c mut Command) -> &'c mut Command {
        cmd.env("CONTAINERS_CONF", &self.conf)
            .env("CONTAINERS_STORAGE_CONF", &self.storage_conf)
            // Docker's format keeps HEALTHCHECK (OCI's has no such field),
            // for podman-compose's builds too.
            .env("BUILDAH_FORMAT", "docker")
    }

    /// Runs podman with `args` and returns its trimmed stdout; panics with
    /// its output when it fails.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "podman {args:?}: {}",
            crate::helpers::text(&out)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    pub fn run(&self, args: &[&str]) -> Output {
        self.cmd().args(args).output().unwrap()
    }

    /// Polls the image's own HEALTHCHECK (`hookbox healthcheck`) until it
    /// passes.
    pub async fn wait_healthy(&self, container: &str) {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let out = self.run(&["healthcheck", "run", container]);
            if out.status.success() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{container} not healthy after {PATIENCE:?}: {}\n{}",
                crate::helpers::text(&out),
                crate::helpers::text(&self.run(&["logs", container]))
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The container's exit code, once it has stopped.
    pub fn exit_code(&self, container: &str) -> String {
        self.ok(&["inspect", "--format", "{{.State.ExitCode}}", container])
    }

    /// The database in `volume`, as the host sees it.
    pub fn database(&self, volume: &Volume) -> PathBuf {
        let mountpoint = self.ok(&[
            "volume",
            "inspect",
            "--format",
            "{{.Mountpoint}}",
            &volume.0,
        ]);
        Path::new(&mountpoint).join("hookbox.db")
    }
}

/// A name no other test (or run) of this process uses.
pub fn unique(what: &str) -> String {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    format!(
        "hookbox-test-{what}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// A named volume, removed on drop.
pub struct Volume(pub String, &'static Podman);

impl Volume {
    pub fn new(podman: &'static Podman) -> Volume {
        let name = unique("state");
        podman.ok(&["volume", "create", &name]);
        Volume(name, podman)
    }
}

impl Drop for Volume {
    fn drop(&mut self) {
        let _ = self.1.run(&["volume", "rm", "-f", &self.0]);
    }
}

/// A container, removed (killed if need be) on drop, so a failed
/// assertion leaves nothing running.
pub struct Container(pub String, &'static Podman);

impl Container {
    /// `podman run -d` of [`IMAGE`] with `args` before the image.
    pub fn run(podman: &'static Podman, args: &[&str]) -> Container {
        let name = unique("run");
        let mut all = vec!["run", "-d", "--name", &name];
        all.extend_from_slice(args);
        all.push(IMAGE);
        podman.ok(&all);
        Container(name, podman)
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        let _ = self.1.run(&["rm", "-f", "-t", "0", &self.0]);
    }
}

fn is_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// Whether `target/release/hookbox` is newer than every source it is
/// built from (an older one would put old code in the image).
fn release_binary_is_fresh() -> bool {
    fn newest(path: &Path) -> SystemTime {
        let meta = std::fs::metadata(path).unwrap();
        if !meta.is_dir() {
            return meta.modified().unwrap();
        }
        std::fs::read_dir(path)
            .unwrap()
            .map(|entry| newest(&entry.unwrap().path()))
            .max()
            .unwrap_or(SystemTime::UNIX_EPOCH)
    }
    let Ok(built) = std::fs::metadata(repo().join("target/release/hookbox")) else {
        return false;
    };
    let sources = ["src", "Cargo.toml", "Cargo.lock", "build.rs"]
        .iter()
        .map(|p| newest(&repo().join(p)))
        .max()
        .unwrap();
    built.modified().unwrap() >= sources
}
