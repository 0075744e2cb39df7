//! ACME against a real ACME server: Debian's `pebble` (Let's Encrypt's
//! test CA) with `pebble-challtestsrv` as its DNS, answering every name
//! with 127.0.0.1. Pebble's validation authority really connects to
//! hookbox's public listener (its `tlsPort` is set to that port) and checks
//! the TLS-ALPN-01 answer: `PEBBLE_VA_ALWAYS_VALID` is not used. Only the
//! artificial sleeps and nonce rejections are turned off, for speed.
//!
//! The real binary obtains a certificate, serves it to a client that
//! trusts only pebble's root, receives a signed delivery over it, serves
//! it again from the cache after a restart without ordering, and renews at
//! start when the cached certificate is near its expiry.
//!
//! `.ci/run` installs pebble; without it the tests say so and pass, except
//! under CI (`CI` set), where a missing pebble fails them.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, KeyUsagePurpose,
};

use crate::helpers::{
    ADMIN_TOKEN, GITHUB_SECRET, debian_tools, free_addr, github_request, hookbox,
};

const DOMAIN: &str = "hooks.example.test";
/// An order against pebble without sleeps takes about a second.
const OBTAIN_WITHIN: Duration = Duration::from_secs(60);

fn pebble_installed() -> bool {
    debian_tools(&["pebble", "pebble-challtestsrv"], "pebble")
}

/// A process killed when dropped.
struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn spawn(command: &mut Command, log: &Path) -> Process {
    let out = std::fs::File::create(log).unwrap();
    let child = command
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .spawn()
        .unwrap_or_else(|e| panic!("starting {command:?}: {e}"));
    Process(child)
}

/// A free port for both TCP and UDP (challtestsrv's DNS listens on both).
fn free_dns_port() -> u16 {
    loop {
        let port = free_addr().port();
        if std::net::UdpSocket::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

/// pebble and its DNS, with pebble's validations aimed at `tls_port`.
struct Pebble {
    _dns: Process,
    pebble: Option<Process>,
    directory: String,
    /// The CA that signed pebble's own HTTPS certificate (for `directory_ca`).
    wfe_ca: PathBuf,
    /// The root pebble issues under, fetched from its management API.
    root: Option<reqwest::Certificate>,
    log: PathBuf,
    config: PathBuf,
    dns_port: u16,
    management: SocketAddr,
    trusting_wfe: reqwest::Client,
}

impl Pebble {
    async fn start(dir: &Path, tls_port: u16) -> Pebble {
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "pebble WFE test CA");
        ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign];
        let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();
        let key = KeyPair::generate().unwrap();
        let wfe = CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
            .unwrap()
            .signed_by(&key, &ca)
            .unwrap();
        let wfe_ca = dir.join("wfe-ca.pem");
        std::fs::write(&wfe_ca, ca.pem()).unwrap();
        std::fs::write(dir.join("wfe.pem"), wfe.pem()).unwrap();
        std::fs::write(dir.join("wfe.key"), key.serialize_pem()).unwrap();

        let (dns_port, dns_management) = (free_dns_port(), free_addr());
        let dns = spawn(
            Command::new("pebble-challtestsrv").args([
                "-dns01",
                &format!("127.0.0.1:{dns_port}"),
                "-management",
                &dns_management.to_string(),
                "-defaultIPv4",
                "127.0.0.1",
                "-defaultIPv6",
                "",
                "-http01",
                "",
                "-https01",
                "",
                "-tlsalpn01",
                "",
            ]),
            &dir.join("challtestsrv.log"),
        );
        // Its management port opens after the DNS server is listening.
        let deadline = Instant::now() + Duration::from_secs(20);
        while tokio::net::TcpStream::connect(dns_management)
            .await
            .is_err()
        {
            assert!(
                Instant::now() < deadline,
                "pebble-challtestsrv did not start:\n{}",
                std::fs::read_to_string(dir.join("challtestsrv.log")).unwrap_or_default()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let (wfe_addr, management) = (free_addr(), free_addr());
        let config = serde_json::json!({"pebble": {
            "listenAddress": wfe_addr.to_string(),
            "managementListenAddress": management.to_string(),
            "certificate": dir.join("wfe.pem"),
            "privateKey": dir.join("wfe.key"),
            "httpPort": free_addr().port(),
            "tlsPort": tls_port,
            "ocspResponderURL": "",
            "externalAccountBindingRequired": false,
        }});
        std::fs::write(dir.join("pebble.json"), config.to_string()).unwrap();
        let mut pebble = Pebble {
            _dns: dns,
            pebble: None,
            directory: format!("https://localhost:{}/dir", wfe_addr.port()),
            wfe_ca,
            root: None,
            log: dir.join("pebble.log"),
            config: dir.join("pebble.json"),
            dns_port,
            management,
            trusting_wfe: reqwest::Client::builder()
                .tls_certs_only([reqwest::Certificate::from_pem(ca.pem().as_bytes()).unwrap()])
                .timeout(Duration::from_secs(5))
                .build()
                .unwrap(),
        };
        pebble.run().await;
        pebble
    }

    /// Starts pebble (again: a restart forgets every account and makes a
    /// new root, as a reset test CA would) and fetches its root.
    async fn run(&mut self) {
        self.pebble = None;
        self.pebble = Some(spawn(
            Command::new("pebble")
                .arg("-config")
                .arg(&self.config)
                .args(["-dnsserver", &format!("127.0.0.1:{}", self.dns_port)])
                .env("PEBBLE_VA_NOSLEEP", "1")
                .env("PEBBLE_WFE_NONCEREJECT", "0"),
            &self.log,
        ));
        let deadline = Instant::now() + Duration::from_secs(20);
        let root = loop {
            let got = self
                .trusting_wfe
                .get(format!(
                    "https://localhost:{}/roots/0",
                    self.management.port()
                ))
                .send()
                .await;
            if let Ok(response) = got
                && response.status() == 200
            {
                break response.bytes().await.unwrap();
            }
            assert!(
                Instant::now() < deadline,
                "pebble did not start:\n{}",
                std::fs::read_to_string(&self.log).unwrap_or_default()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        self.root = Some(reqwest::Certificate::from_pem(&root).unwrap());
    }

    /// A client that trusts pebble's root only and reaches `DOMAIN` at
    /// `addr`, with a new handshake per request.
    fn client(&self, addr: SocketAddr) -> reqwest::Client {
        reqwest::Client::builder()
            .tls_certs_only(self.root.clone())
            .resolve(DOMAIN, addr)
            .tls_info(true)
            .pool_max_idle_per_host(0)
            .timeout(Duration::from_secs(5))
            .build()
            .unwrap()
    }
}

/// hookbox with `[server.tls.acme]` pointed at pebble, on `addr`.
struct Hookbox {
    process: Process,
    log: PathBuf,
    admin: SocketAddr,
}

impl Hookbox {
    fn start(dir: &Path, addr: SocketAddr, pebble: &Pebble, run: usize) -> Hookbox {
        let config = dir.join("hookbox.toml");
        let admin = free_addr();
        std::fs::write(
            &config,
            format!(
                "[server]\nlisten = \"{addr}\"\nadmin_listen = \"{}\"\ndatabase = {:?}\n\
                 [server.tls.acme]\ndomains = [\"{DOMAIN}\"]\ncontact = [\"ops@example.test\"]\n\
                 directory = \"{}\"\ndirectory_ca = {:?}\n[admin]\ntoken = \"{ADMIN_TOKEN}\"\n\
                 [[sources]]\nname = \"github\"\nkind = \"github\"\nsecrets = [\"{GITHUB_SECRET}\"]\n",
                admin,
                dir.join("hookbox.db").display().to_string(),
                pebble.directory,
                pebble.wfe_ca.display().to_string(),
            ),
        )
        .unwrap();
        let log = dir.join(format!("hookbox-{run}.log"));
        let mut command = hookbox();
        command.args(["serve", "--config"]).arg(&config);
        Hookbox {
            process: spawn(&mut command, &log),
            log,
            admin,
        }
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The certificate expiry hookbox reports in /metrics.
    async fn expiry_metric(&self) -> i64 {
        let text = reqwest::Client::new()
            .get(format!("http://{}/metrics", self.admin))
            .bearer_auth(ADMIN_TOKEN)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let line = text
            .lines()
            .find(|l| l.starts_with("hookbox_tls_certificate_expiry_timestamp_seconds "))
            .unwrap_or_else(|| panic!("no expiry gauge in:\n{text}"));
        line.rsplit(' ').next().unwrap().parse().unwrap()
    }

    /// SIGTERM and the exit status.
    fn stop(mut self) -> std::process::ExitStatus {
        let pid = nix::unistd::Pid::from_raw(self.process.0.id() as i32);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
        self.process.0.wait().unwrap()
    }
}

/// The certificate served for `DOMAIN`, once one that `client` trusts is
/// served.
async fn wait_for_trusted_cert(
    client: &reqwest::Client,
    addr: SocketAddr,
    hookbox: &Hookbox,
    pebble: &Pebble,
) -> Vec<u8> {
    let deadline = Instant::now() + OBTAIN_WITHIN;
    loop {
        let got = client
            .get(format!("https://{DOMAIN}:{}/healthz", addr.port()))
            .send()
            .await;
        if let Ok(response) = got {
            assert_eq!(response.status(), 200);
            let info = response
                .extensions()
                .get::<reqwest::tls::TlsInfo>()
                .expect("tls_info is on");
            return info
                .peer_certificate()
                .expect("a peer certificate")
                .to_vec();
        }
        assert!(
            Instant::now() < deadline,
            "no trusted certificate within {OBTAIN_WITHIN:?}\n--- hookbox ---\n{}\n--- pebble ---\n{}",
            hookbox.log_text(),
            std::fs::read_to_string(&pebble.log).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn cached(dir: &Path, prefix: &str) -> PathBuf {
    std::fs::read_dir(dir.join("acme"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with(prefix))
        })
        .unwrap_or_else(|| panic!("no {prefix}* in the ACME cache"))
}

fn not_after(der: &[u8]) -> i64 {
    let (_, cert) = x509_parser::parse_x509_certificate(der).unwrap();
    cert.validity().not_after.timestamp()
}

#[tokio::test]
async fn hookbox_obtains_a_certificate_from_pebble_serves_it_and_renews_it_near_expiry() {
    use std::os::unix::fs::PermissionsExt as _;

    if !pebble_installed() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let addr = free_addr();
    let mut pebble = Pebble::start(dir.path(), addr.port()).await;
    let client = pebble.client(addr);

    // 1. No certificate yet: hookbox orders one, pebble validates over
    // TLS-ALPN-01 on hookbox's own listener, and a client trusting only
    // pebble's root gets a certificate for the domain.
    let hookbox = Hookbox::start(dir.path(), addr, &pebble, 0);
    let first = wait_for_trusted_cert(&client, addr, &hookbox, &pebble).await;
    let log = std::fs::read_to_string(&pebble.log).unwrap();
    assert!(
        log.contains("set VALID by completed challenge"),
        "pebble validated no challenge:\n{log}"
    );

    // A signed delivery over that HTTPS connection is stored.
    let body = br#"{"zen":"Speak like a human."}"#;
    let url = format!("https://{DOMAIN}:{}/hooks/github", addr.port());
    let response = github_request(&client, &url, "acme-1", body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 202);
    assert_eq!(hookbox.expiry_metric().await, not_after(&first));

    // The account and the pair are cached, private.
    for prefix in ["account-", "cert-", "key-"] {
        let mode = std::fs::metadata(cached(dir.path(), prefix))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "{prefix}");
    }
    let acme_dir = std::fs::metadata(dir.path().join("acme")).unwrap();
    assert_eq!(acme_dir.permissions().mode() & 0o777, 0o700);
    assert!(hookbox.stop().success());

    // 2. A restart serves the cached certificate, without a new order.
    let hookbox = Hookbox::start(dir.path(), addr, &pebble, 1);
    let again = wait_for_trusted_cert(&client, addr, &hookbox, &pebble).await;
    assert_eq!(again, first, "a restart must serve the cached certificate");
    let log = hookbox.log_text();
    assert!(log.contains("serving the cached ACME certificate"), "{log}");
    assert!(!log.contains("ACME certificate obtained"), "{log}");
    assert!(hookbox.stop().success());

    // 3. Told the certificate is near expiry: the cache now holds one for
    // the domain, 60 days old with a day left. hookbox serves it at start,
    // sees less than a third of its lifetime left, and renews from pebble
    // without a restart.
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(vec![DOMAIN.to_owned()]).unwrap();
    let now = time::OffsetDateTime::now_utc();
    params.not_before = now - time::Duration::days(60);
    params.not_after = now + time::Duration::days(1);
    let expiring = params.self_signed(&key).unwrap();
    std::fs::write(cached(dir.path(), "key-"), key.serialize_pem()).unwrap();
    std::fs::write(cached(dir.path(), "cert-"), expiring.pem()).unwrap();
    let hookbox = Hookbox::start(dir.path(), addr, &pebble, 2);
    let renewed = wait_for_trusted_cert(&client, addr, &hookbox, &pebble).await;
    assert_ne!(renewed, first);
    assert_ne!(renewed, expiring.der().to_vec());
    assert!(not_after(&renewed) > not_after(expiring.der()));
    // The renewed certificate is served as soon as it is installed; the
    // line saying so may follow a moment later.
    let deadline = Instant::now() + Duration::from_secs(5);
    let log = loop {
        let log = hookbox.log_text();
        if log.contains("ACME certificate obtained") || Instant::now() > deadline {
            break log;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(log.contains("serving the cached ACME certificate"), "{log}");
    assert!(log.contains("ACME certificate obtained"), "{log}");
    assert!(hookbox.stop().success());

    // 4. The CA forgot the account (pebble restarted at the same address,
    // as a reset test CA does): the order fails with accountDoesNotExist,
    // hookbox registers a new account at once and renews.
    pebble.run().await;
    std::fs::write(cached(dir.path(), "key-"), key.serialize_pem()).unwrap();
    std::fs::write(cached(dir.path(), "cert-"), expiring.pem()).unwrap();
    let hookbox = Hookbox::start(dir.path(), addr, &pebble, 3);
    let client = pebble.client(addr);
    wait_for_trusted_cert(&client, addr, &hookbox, &pebble).await;
    let log = hookbox.log_text();
    assert!(log.contains("accountDoesNotExist"), "{log}");
    assert!(log.contains("ACME account registered"), "{log}");
    assert!(hookbox.stop().success());
}

/// Waits until hookbox's log has `what`; returns the log.
async fn wait_for_log(hookbox: &Hookbox, what: &str) -> String {
    let deadline = Instant::now() + OBTAIN_WITHIN;
    loop {
        let log = hookbox.log_text();
        if log.contains(what) {
            return log;
        }
        assert!(Instant::now() < deadline, "no {what:?} logged:\n{log}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn a_failed_order_is_logged_with_the_reason_and_its_backoff_outlives_a_restart() {
    use std::os::unix::fs::PermissionsExt as _;

    if !pebble_installed() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let addr = free_addr();
    // Pebble validates on a port where nothing listens: the challenge
    // cannot be answered.
    let pebble = Pebble::start(dir.path(), free_addr().port()).await;
    let started = Instant::now();
    let hookbox = Hookbox::start(dir.path(), addr, &pebble, 0);
    let log = wait_for_log(&hookbox, "ACME order failed").await;
    let failed_within = started.elapsed();
    // The CA's own reason, as pebble gave it: in its answer to the
    // challenge when it validates at once, or later while hookbox polls.
    assert!(
        log.contains("waiting for the CA to validate") || log.contains("asking the CA to validate"),
        "{log}"
    );
    assert!(log.contains("urn:ietf:params:acme:error:"), "{log}");
    assert!(log.contains(DOMAIN), "{log}");
    assert!(log.contains("retry_in=120s"), "{log}");
    // No certificate: a handshake fails, but the process serves on.
    let client = pebble.client(addr);
    assert!(
        client
            .get(format!("https://{DOMAIN}:{}/healthz", addr.port()))
            .send()
            .await
            .is_err()
    );
    let backoff = cached(dir.path(), "backoff-");
    let mode = std::fs::metadata(&backoff).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "{}", backoff.display());
    assert!(hookbox.stop().success());

    // A restart keeps waiting: no order for at least as long as the first
    // one took to fail (and would, for two minutes).
    let hookbox = Hookbox::start(dir.path(), addr, &pebble, 1);
    wait_for_log(&hookbox, "ACME orders failed before this start").await;
    tokio::time::sleep(failed_within + Duration::from_secs(1)).await;
    let log = hookbox.log_text();
    assert!(log.contains("failures=1"), "{log}");
    assert!(!log.contains("ACME order failed"), "ordered again:\n{log}");
    assert!(hookbox.stop().success());

    // Removing the record, as the log says, orders at once.
    std::fs::remove_file(&backoff).unwrap();
    let hookbox = Hookbox::start(dir.path(), addr, &pebble, 2);
    let log = wait_for_log(&hookbox, "ACME order failed").await;
    assert!(log.contains("retry_in=120s"), "{log}");
    assert!(hookbox.stop().success());
}
