//! HTTPS on the public listener from certificate files (`[server.tls]`):
//! a real TLS client trusting only a test CA made here with rcgen, the
//! pair replaced on disk (noticed by polling) and on SIGHUP through the
//! real binary, a bad replacement ignored, handshakes that never finish
//! cut off, and the admin listener left plain.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose, SerialNumber,
};
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

use crate::helpers::{ChildServer, GITHUB_SOURCE, TestApp, github_request, hookbox};

const BODY: &[u8] = br#"{"zen":"Encrypt everything."}"#;
/// How long a reload may take to show: polling every 1 s here, 5 s by
/// default, with room for a slow machine.
const RELOAD_WITHIN: Duration = Duration::from_secs(15);

/// A test certificate authority; each has its own key and name, so a
/// client trusting one refuses the other's certificates.
struct Ca {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

impl Ca {
    fn new(name: &str) -> Ca {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let issuer = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
        Ca { issuer }
    }

    fn pem(&self) -> String {
        self.issuer.pem()
    }

    /// A leaf for localhost and 127.0.0.1: (full chain PEM, PKCS#8 key PEM).
    fn leaf(&self, serial: u64) -> (String, String) {
        let mut params =
            CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()]).unwrap();
        params.serial_number = Some(SerialNumber::from(serial));
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        (format!("{}{}", cert.pem(), self.pem()), key.serialize_pem())
    }

    /// A client that trusts this CA and nothing else, with no connection
    /// reuse, so each request makes a new handshake (which may resume a
    /// TLS session this client made before).
    fn client(&self) -> reqwest::Client {
        reqwest::Client::builder()
            .tls_certs_only([reqwest::Certificate::from_pem(self.pem().as_bytes()).unwrap()])
            .pool_max_idle_per_host(0)
            .timeout(Duration::from_secs(5))
            .build()
            .unwrap()
    }
}

/// Where the pair lives, replaced the way certbot does it: written beside
/// and renamed into place.
struct Files {
    cert: PathBuf,
    key: PathBuf,
}

impl Files {
    fn new(dir: &Path) -> Files {
        Files {
            cert: dir.join("fullchain.pem"),
            key: dir.join("privkey.pem"),
        }
    }

    fn write(&self, (cert, key): &(String, String)) {
        for (path, text) in [(&self.cert, cert), (&self.key, key)] {
            let tmp = path.with_extension("new");
            std::fs::write(&tmp, text).unwrap();
            std::fs::rename(&tmp, path).unwrap();
        }
    }

    fn server_lines(&self, watch_interval: &str) -> String {
        format!(
            "[server.tls]\ncert = {:?}\nkey = {:?}\nwatch_interval = \"{watch_interval}\"\n",
            self.cert.display().to_string(),
            self.key.display().to_string()
        )
    }
}

async fn post(client: &reqwest::Client, addr: SocketAddr, delivery: &str) -> reqwest::Result<u16> {
    let url = format!("https://127.0.0.1:{}/hooks/github", addr.port());
    github_request(client, &url, delivery, BODY)
        .send()
        .await
        .map(|r| r.status().as_u16())
}

/// Posts with `client` until the handshake succeeds, within [`RELOAD_WITHIN`].
async fn wait_until_trusted(client: &reqwest::Client, addr: SocketAddr, delivery: &str) -> u16 {
    let deadline = Instant::now() + RELOAD_WITHIN;
    loop {
        match post(client, addr, delivery).await {
            Ok(status) => return status,
            Err(e) => assert!(
                Instant::now() < deadline,
                "the new certificate was not served within {RELOAD_WITHIN:?}: {e:?}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The TLS lines must sit inside `[server]`, after the other server keys:
/// `spawn_with` puts them last there.
async fn spawn(files: &Files, extra: &str, watch_interval: &str) -> TestApp {
    let server = format!("{extra}\n{}", files.server_lines(watch_interval));
    TestApp::spawn_with(GITHUB_SOURCE, &server).await
}

#[tokio::test]
async fn a_signed_delivery_over_https_is_stored_and_replaced_files_are_served_without_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let files = Files::new(dir.path());
    let (old_ca, new_ca) = (Ca::new("old test CA"), Ca::new("new test CA"));
    files.write(&old_ca.leaf(1));
    let app = spawn(&files, "", "1s").await;
    let old_client = old_ca.client();
    let new_client = new_ca.client();

    assert_eq!(post(&old_client, app.addr, "tls-1").await.unwrap(), 202);
    assert_eq!(
        app.count("SELECT count(*) FROM events WHERE delivery_id = 'tls-1'"),
        1
    );
    assert!(
        post(&new_client, app.addr, "tls-x").await.is_err(),
        "a client trusting only the new CA refuses the old certificate"
    );

    // Plain HTTP to the TLS port gets no answer; the admin listener stays plain.
    let plain = app.client.get(app.url("/healthz")).send().await;
    assert!(
        plain.is_err(),
        "plain HTTP answered on the TLS port: {plain:?}"
    );
    let admin = app.admin_get("/api/stats").await;
    assert_eq!(admin.status(), 200);

    // A keep-alive connection made now outlives the swap.
    let kept = reqwest::Client::builder()
        .tls_certs_only([reqwest::Certificate::from_pem(old_ca.pem().as_bytes()).unwrap()])
        .build()
        .unwrap();
    assert_eq!(post(&kept, app.addr, "tls-kept-1").await.unwrap(), 202);

    // A key that does not match: ignored, the old pair keeps serving.
    let (old_cert, _) = old_ca.leaf(2);
    let (_, stranger_key) = old_ca.leaf(3);
    files.write(&(old_cert, stranger_key));
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(post(&old_client, app.addr, "tls-2").await.unwrap(), 202);

    // A new pair from another CA: new connections get it, no restart.
    files.write(&new_ca.leaf(4));
    assert_eq!(
        wait_until_trusted(&new_client, app.addr, "tls-3").await,
        202
    );
    // A fresh client: one that talked to the old pair may resume its TLS
    // session, which (rightly) involves no certificate.
    assert!(post(&old_ca.client(), app.addr, "tls-y").await.is_err());
    assert_eq!(post(&kept, app.addr, "tls-kept-2").await.unwrap(), 202);
    assert_eq!(
        app.count("SELECT count(*) FROM events WHERE delivery_id LIKE 'tls-%'"),
        5
    );
    app.shutdown().await;
}

#[tokio::test]
async fn a_client_that_never_finishes_the_handshake_is_cut_off() {
    let dir = tempfile::tempdir().unwrap();
    let files = Files::new(dir.path());
    let ca = Ca::new("test CA");
    files.write(&ca.leaf(1));
    let app = spawn(&files, "header_timeout = \"1s\"", "5s").await;
    let mut silent = TcpStream::connect(app.addr).await.unwrap();
    let mut buf = [0u8; 16];
    let read = tokio::time::timeout(Duration::from_secs(10), silent.read(&mut buf)).await;
    // Disconnected (EOF or reset) by the header timeout, not left open.
    match read {
        Ok(Ok(0)) | Ok(Err(_)) => {}
        other => panic!("the silent connection was not closed: {other:?}"),
    }
    app.shutdown().await;
}

#[tokio::test]
async fn at_the_connection_cap_a_stalled_handshake_makes_room_for_a_real_client() {
    let dir = tempfile::tempdir().unwrap();
    let files = Files::new(dir.path());
    let ca = Ca::new("test CA");
    files.write(&ca.leaf(1));
    // The header timeout alone would hold the slot for a minute.
    let app = spawn(
        &files,
        "header_timeout = \"60s\"\nmax_connections = 1",
        "5s",
    )
    .await;
    let mut silent = TcpStream::connect(app.addr).await.unwrap();
    // Let the server accept it (taking the only slot) before the real client.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let client = reqwest::Client::builder()
        .tls_certs_only([reqwest::Certificate::from_pem(ca.pem().as_bytes()).unwrap()])
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let (status, read) = tokio::join!(post(&client, app.addr, "tls-wait"), async {
        let mut buf = [0u8; 16];
        tokio::time::timeout(Duration::from_secs(10), silent.read(&mut buf)).await
    });
    match read {
        Ok(Ok(0)) | Ok(Err(_)) => {}
        other => panic!("the stalled handshake was not closed: {other:?}"),
    }
    assert_eq!(status.unwrap(), 202);
    app.shutdown().await;
}

#[tokio::test]
async fn the_binary_reloads_its_certificate_on_sighup_and_keeps_the_old_one_when_the_new_is_bad() {
    use nix::sys::signal::Signal;

    let dir = tempfile::tempdir().unwrap();
    let files = Files::new(dir.path());
    let (old_ca, new_ca) = (Ca::new("old test CA"), Ca::new("new test CA"));
    files.write(&old_ca.leaf(1));
    // Polling off: only SIGHUP reloads.
    let db = dir.path().join("hookbox.db");
    let tls = files.server_lines("0s");
    let mut binary = ChildServer::spawn_ready(dir.path(), &db, GITHUB_SOURCE, &tls, 0).await;
    let (old_client, new_client) = (old_ca.client(), new_ca.client());
    assert_eq!(post(&old_client, binary.addr, "hup-1").await.unwrap(), 202);

    // Polling is off: the new files are not noticed until SIGHUP.
    files.write(&new_ca.leaf(2));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(post(&old_client, binary.addr, "hup-2").await.unwrap(), 202);
    binary.signal(Signal::SIGHUP);
    assert_eq!(
        wait_until_trusted(&new_client, binary.addr, "hup-3").await,
        202
    );
    assert!(post(&old_ca.client(), binary.addr, "hup-x").await.is_err());

    // A broken key and SIGHUP: logged with the path, the pair in use stays.
    std::fs::write(&files.key, "not a key\n").unwrap();
    binary.signal(Signal::SIGHUP);
    let deadline = Instant::now() + RELOAD_WITHIN;
    while !binary.output().contains("not reloaded") {
        assert!(
            Instant::now() < deadline,
            "no reload error logged:\n{}",
            binary.output()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let log = binary.output();
    assert!(log.contains(&files.key.display().to_string()), "{log}");
    assert_eq!(post(&new_client, binary.addr, "hup-4").await.unwrap(), 202);
    assert!(
        binary.child.try_wait().unwrap().is_none(),
        "SIGHUP stopped hookbox"
    );

    binary.signal(Signal::SIGTERM);
    let status = binary.child.wait().unwrap();
    assert_eq!(status.code(), Some(0), "{}", binary.output());
    let db = rusqlite::Connection::open(dir.path().join("hookbox.db")).unwrap();
    let stored: i64 = db
        .query_row(
            "SELECT count(*) FROM events WHERE delivery_id LIKE 'hup-%'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(stored, 4);
}

#[test]
fn a_key_that_does_not_match_the_certificate_stops_start_up_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let files = Files::new(dir.path());
    let ca = Ca::new("test CA");
    let (cert, _) = ca.leaf(1);
    let (_, other_key) = ca.leaf(2);
    files.write(&(cert, other_key));
    let config = dir.path().join("hookbox.toml");
    std::fs::write(
        &config,
        format!(
            "[server]\ndatabase = {:?}\n{}",
            dir.path().join("hookbox.db").display().to_string(),
            files.server_lines("5s")
        ),
    )
    .unwrap();
    let out = hookbox()
        .args(["check", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(!out.status.success(), "{text}");
    assert!(text.contains("server.tls"), "{text}");
    assert!(
        text.contains(&format!("key {} does not match", files.key.display())),
        "{text}"
    );
}
