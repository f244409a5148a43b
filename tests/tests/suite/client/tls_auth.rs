//! The client's TLS and credentials against a small fake node written here: a tokio-rustls
//! acceptor with rcgen certificates (a CA, a server certificate for 127.0.0.1, a client
//! certificate with CN `alice`) that records each request's `Authorization` header and the
//! client certificate's CN, and answers canned JSON. It proves the client trusts only the
//! given CA, presents its certificate, sends its token on calls and watches, fails a handshake
//! with a foreign CA once and clearly, never sends a token in the clear to another host, and
//! does not retry 401, 403 or 429.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::server::WebPkiClientVerifier;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;
use turnstile_client::{
    Access, Client, ClientConfig, Error, Permission, PermissionKind, PutOptions, Role, Security,
    WatchOptions,
};

/// A CA and what it signed, as PEM.
struct Pki {
    ca_pem: String,
    server_cert: CertificateDer<'static>,
    server_key_der: Vec<u8>,
    client_cert_pem: String,
    client_key_pem: String,
    ca_der: CertificateDer<'static>,
}

impl Pki {
    fn new(ca_name: &str) -> anyhow::Result<Pki> {
        let mut ca_params = CertificateParams::default();
        ca_params
            .distinguished_name
            .push(DnType::CommonName, ca_name);
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        ca_params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate()?)?;

        let mut server = CertificateParams::new(vec!["127.0.0.1".to_string()])?;
        server.distinguished_name.push(DnType::CommonName, "node-1");
        server.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let server_key = KeyPair::generate()?;
        let server_cert = server.signed_by(&server_key, &ca)?;

        let mut client = CertificateParams::new(Vec::<String>::new())?;
        client.distinguished_name.push(DnType::CommonName, "alice");
        client.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let client_key = KeyPair::generate()?;
        let client_cert = client.signed_by(&client_key, &ca)?;

        Ok(Pki {
            ca_pem: ca.pem(),
            ca_der: ca.der().clone(),
            server_cert: server_cert.der().clone(),
            server_key_der: server_key.serialize_der(),
            client_cert_pem: client_cert.pem(),
            client_key_pem: client_key.serialize_pem(),
        })
    }

    /// A server config with this PKI's server certificate, taking client certificates of
    /// this CA (optionally: a client without one gets through, as on a node).
    fn server_config(&self) -> anyhow::Result<Arc<rustls::ServerConfig>> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        roots.add(self.ca_der.clone())?;
        let verifier =
            WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                .allow_unauthenticated()
                .build()?;
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.server_key_der.clone()));
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_client_cert_verifier(verifier)
            .with_single_cert(vec![self.server_cert.clone()], key)?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }

    /// Trusts this CA only; presents the client certificate; sends `token`.
    fn security(&self, token: Option<&str>) -> Security {
        let s = Security::default()
            .with_ca_pem(self.ca_pem.as_bytes())
            .with_identity_pem(
                self.client_cert_pem.as_bytes(),
                self.client_key_pem.as_bytes(),
            );
        match token {
            Some(t) => s.with_token(t),
            None => s,
        }
    }
}

/// One request as the fake node saw it.
#[derive(Debug, Clone)]
struct Seen {
    method: String,
    path: String,
    authorization: Option<String>,
    client_cn: Option<String>,
    body: String,
}

/// The fake node's answer: status, content type, body.
type Reply = (u16, &'static str, String);
type Answer = Arc<dyn Fn(&Seen) -> Reply + Send + Sync>;

/// A fake node on 127.0.0.1 (or `bind`), TLS if a config is given.
struct Fake {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
    /// TCP connections accepted, handshake or not.
    connections: Arc<AtomicUsize>,
}

impl Fake {
    async fn start(
        bind: &str,
        tls: Option<Arc<rustls::ServerConfig>>,
        answer: Answer,
    ) -> anyhow::Result<Fake> {
        let listener = TcpListener::bind(bind).await?;
        let addr = listener.local_addr()?;
        let seen = Arc::new(Mutex::new(Vec::new()));
        let connections = Arc::new(AtomicUsize::new(0));
        let (seen2, connections2) = (seen.clone(), connections.clone());
        let acceptor = tls.map(tokio_rustls::TlsAcceptor::from);
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                connections2.fetch_add(1, Ordering::SeqCst);
                let (seen, answer, acceptor) = (seen2.clone(), answer.clone(), acceptor.clone());
                tokio::spawn(async move {
                    match acceptor {
                        None => serve_one(tcp, None, &seen, &answer).await,
                        Some(acceptor) => {
                            // A failed handshake is what test (d) expects: nothing to serve.
                            let Ok(tls) = acceptor.accept(tcp).await else {
                                return;
                            };
                            let cn = tls
                                .get_ref()
                                .1
                                .peer_certificates()
                                .and_then(|chain| chain.first())
                                .and_then(|leaf| common_name(leaf));
                            serve_one(tls, cn, &seen, &answer).await;
                        }
                    }
                });
            }
        });
        Ok(Fake {
            addr,
            seen,
            connections,
        })
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().map(|s| s.clone()).unwrap_or_default()
    }
}

fn common_name(der: &CertificateDer<'_>) -> Option<String> {
    let (_, cert) = x509_parser::parse_x509_certificate(der.as_ref()).ok()?;
    let cn = cert.subject().iter_common_name().next()?;
    cn.as_str().ok().map(str::to_string)
}

/// Reads one HTTP/1.1 request, records it, answers and closes.
async fn serve_one<S: AsyncRead + AsyncWrite + Unpin>(
    mut io: S,
    client_cn: Option<String>,
    seen: &Mutex<Vec<Seen>>,
    answer: &Answer,
) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        match io.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let mut lines = head.lines();
    let mut request_line = lines.next().unwrap_or_default().split(' ');
    let method = request_line.next().unwrap_or_default().to_string();
    let path = request_line.next().unwrap_or_default().to_string();
    let header = |name: &str| {
        head.lines().skip(1).find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case(name).then(|| v.trim().to_string())
        })
    };
    let length: usize = header("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    while buf.len() < head_end + length {
        match io.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    let request = Seen {
        method,
        path,
        authorization: header("authorization"),
        client_cn,
        body: String::from_utf8_lossy(&buf[head_end..head_end + length]).to_string(),
    };
    let (status, content_type, body) = answer(&request);
    if let Ok(mut s) = seen.lock() {
        s.push(request);
    }
    let response = format!(
        "HTTP/1.1 {status} X\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = io.write_all(response.as_bytes()).await;
    let _ = io.shutdown().await;
}

fn config(security: Security, retry_budget: Duration) -> ClientConfig {
    ClientConfig {
        request_timeout: Duration::from_secs(5),
        retry_budget,
        connect_timeout: Duration::from_secs(1),
        security,
    }
}

fn json(status: u16, body: serde_json::Value) -> Reply {
    (status, "application/json", body.to_string())
}

/// Canned answers by route.
fn canned(req: &Seen) -> Reply {
    let path = req.path.split('?').next().unwrap_or_default();
    match (req.method.as_str(), path) {
        ("GET", "/v1/auth/whoami") => json(
            200,
            serde_json::json!({"user": "alice", "roles": ["jobs"],
                               "quotas": {"leases": 5}, "usage": {"leases": 1}}),
        ),
        ("GET", "/v1/watch") => (
            200,
            "text/event-stream",
            "id: 3.0\nevent: put\ndata: {\"revision\":3,\"seq\":0,\"kind\":\"put\",\"key\":\"k\",\"value\":\"v\"}\n\n"
                .to_string(),
        ),
        ("PUT", "/v1/auth/roles/jobs") => json(200, serde_json::json!({"revision": 11})),
        ("POST", "/v1/auth/tokens") => json(
            200,
            serde_json::json!({"token_id": "t1", "token": "minted", "revision": 12}),
        ),
        _ => json(
            404,
            serde_json::json!({"code": "not_found", "message": "no route"}),
        ),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_with_client_certificate_and_token() -> anyhow::Result<()> {
    let pki = Pki::new("cluster CA")?;
    let fake = Fake::start("127.0.0.1:0", Some(pki.server_config()?), Arc::new(canned)).await?;
    // A bare ip:port means https once a CA is given.
    let client = Client::with_config(
        vec![fake.addr.to_string()],
        config(pki.security(Some("s3cret")), Duration::from_secs(5)),
    )?;
    assert!(client.endpoints()[0].starts_with("https://"));

    let me = client.whoami().await?;
    assert_eq!(
        (me.user.as_str(), me.usage.get("leases")),
        ("alice", Some(&1))
    );

    let mut watch = client.watch(WatchOptions::prefix("k").from_revision(3));
    let event = watch.next().await.transpose()?;
    assert_eq!(
        event.and_then(|e| e.value().map(str::to_string)),
        Some("v".into())
    );
    drop(watch);

    let role = Role {
        permissions: vec![Permission {
            kind: PermissionKind::Lock,
            prefix: "jobs/".into(),
            access: Access::Write,
        }],
        metrics: false,
    };
    assert_eq!(client.put_role("jobs", &role).await?.revision, 11);
    let token = client.create_token("alice", Some(3_600_000)).await?;
    assert_eq!(
        (token.token_id.as_str(), token.token.as_str()),
        ("t1", "minted")
    );

    let seen = fake.seen();
    let paths: Vec<&str> = seen
        .iter()
        .map(|s| s.path.split('?').next().unwrap_or_default())
        .collect();
    assert_eq!(
        paths,
        [
            "/v1/auth/whoami",
            "/v1/watch",
            "/v1/auth/roles/jobs",
            "/v1/auth/tokens"
        ]
    );
    for s in &seen {
        assert_eq!(s.authorization.as_deref(), Some("Bearer s3cret"), "{s:?}");
        assert_eq!(s.client_cn.as_deref(), Some("alice"), "{s:?}");
    }
    let role_body: serde_json::Value = serde_json::from_str(&seen[2].body)?;
    assert_eq!(
        role_body,
        serde_json::json!({"permissions": [{"kind": "lock", "prefix": "jobs/", "access": "write"}], "metrics": false})
    );
    let token_body: serde_json::Value = serde_json::from_str(&seen[3].body)?;
    assert_eq!(
        token_body,
        serde_json::json!({"user": "alice", "ttl_ms": 3_600_000})
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_of_another_ca_fails_the_handshake_once() -> anyhow::Result<()> {
    let ours = Pki::new("our CA")?;
    let theirs = Pki::new("their CA")?;
    let fake = Fake::start(
        "127.0.0.1:0",
        Some(theirs.server_config()?),
        Arc::new(canned),
    )
    .await?;
    // A long retry budget: a retried handshake would show up as more connections.
    let client = Client::with_config(
        vec![fake.addr.to_string()],
        config(ours.security(None), Duration::from_secs(30)),
    )?;
    let err = client
        .whoami()
        .await
        .expect_err("a foreign CA is not trusted");
    let Error::Tls { endpoint, .. } = &err else {
        panic!("expected a TLS error, got {err:?}");
    };
    assert_eq!(endpoint, &fake.addr.to_string());
    let text = err.to_string();
    assert!(
        text.starts_with(&format!("TLS handshake with {} failed: ", fake.addr)),
        "{text}"
    );
    assert!(text.contains("certificate"), "{text}");

    let mut watch = client.watch(WatchOptions::prefix("k").from_revision(1));
    let watched = watch.next().await;
    assert!(
        matches!(watched, Some(Err(Error::Tls { .. }))),
        "{watched:?}"
    );

    assert_eq!(
        fake.connections.load(Ordering::SeqCst),
        2,
        "one handshake per call"
    );
    assert!(fake.seen().is_empty());
    Ok(())
}

/// This machine's address on its default route, if it has one that is not loopback.
fn non_loopback_ip() -> Option<std::net::IpAddr> {
    let probe = std::net::UdpSocket::bind("0.0.0.0:0").ok()?;
    // A UDP connect sends nothing; it only picks the route.
    probe.connect("192.0.2.1:9").ok()?;
    let ip = probe.local_addr().ok()?.ip();
    (!ip.is_loopback() && !ip.is_unspecified()).then_some(ip)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_is_never_sent_in_the_clear_to_another_host() -> anyhow::Result<()> {
    let fake = Fake::start("0.0.0.0:0", None, Arc::new(canned)).await?;
    let port = fake.addr.port();
    let token = || Security::default().with_token("s3cret");

    // Loopback over plain HTTP is allowed (a dev cluster), and the token goes out.
    let local = Client::with_config(
        vec![format!("127.0.0.1:{port}")],
        config(token(), Duration::from_secs(5)),
    )?;
    local.whoami().await?;
    assert_eq!(
        fake.seen()[0].authorization.as_deref(),
        Some("Bearer s3cret")
    );

    // Another host: refused when the client is built, so nothing can be sent. One plain
    // endpoint among loopback ones is enough to refuse.
    let far = non_loopback_ip().map_or_else(|| "192.0.2.1".to_string(), |ip| ip.to_string());
    let endpoints = vec![format!("127.0.0.1:{port}"), format!("http://{far}:{port}")];
    let refused = Client::with_config(endpoints, config(token(), Duration::from_secs(5)));
    let Err(Error::Config { message }) = &refused else {
        panic!("expected a configuration error, got {refused:?}");
    };
    assert!(
        message.contains("plain HTTP") && message.contains(&far),
        "{message}"
    );
    // Without a token the same endpoint is fine: the refusal is about the credential.
    let anonymous = Client::new(vec![format!("http://{far}:{port}")])?;
    if non_loopback_ip().is_some() {
        anonymous.whoami().await?;
        let seen = fake.seen();
        assert_eq!(seen.len(), 2);
        assert_eq!(seen[1].authorization, None);
    }
    assert_eq!(fake.connections.load(Ordering::SeqCst), fake.seen().len());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unauthenticated_denied_and_over_quota_are_final() -> anyhow::Result<()> {
    let answer: Answer = Arc::new(|req: &Seen| {
        let key = req.path.rsplit('/').next().unwrap_or_default();
        let (status, code) = match key {
            "a" => (401, "unauthenticated"),
            "b" => (403, "permission_denied"),
            "c" => (429, "quota_exceeded"),
            _ => (503, "no_quorum"),
        };
        json(
            status,
            serde_json::json!({"code": code, "message": format!("{code} for {key}")}),
        )
    });
    let fake = Fake::start("127.0.0.1:0", None, answer).await?;
    let client = Client::with_config(
        vec![fake.addr.to_string()],
        config(Security::default().with_token("t"), Duration::from_secs(2)),
    )?;
    let mut sent = 0;
    for key in ["a", "b", "c"] {
        // A write (which an unknown outcome would resend) and a read (resent on any doubt).
        for write in [true, false] {
            let result = if write {
                client
                    .put(key, "v", PutOptions::default())
                    .await
                    .map(|_| ())
            } else {
                client.get(key).await.map(|_| ())
            };
            sent += 1;
            let err = result.expect_err("refused");
            let typed = match (key, &err) {
                ("a", Error::Unauthenticated { message })
                | ("b", Error::PermissionDenied { message })
                | ("c", Error::QuotaExceeded { message }) => {
                    message.ends_with(&format!("for {key}"))
                }
                _ => false,
            };
            assert!(typed, "{key}: {err:?}");
            let seen = fake.seen();
            assert_eq!(seen.len(), sent, "{key}: sent once, not retried: {seen:?}");
        }
    }
    // The control: a 503 no_quorum is retried, so the counting above could see retries.
    let control = client.get("d").await;
    assert!(
        matches!(control, Err(Error::NoQuorum { .. })),
        "{control:?}"
    );
    assert!(fake.seen().len() > sent + 1, "no_quorum was not retried");
    Ok(())
}
