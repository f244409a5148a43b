//! Shared by the client's integration suites: a TCP proxy on `127.0.0.1:0` in front of one
//! node, which can stop forwarding (cut the client off without touching the cluster) or
//! forward requests but swallow the answers (a write applied whose answer is lost).

#![allow(dead_code)]

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use turnstile_client::{Client, ClientConfig};

/// What the proxy does with traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Forward,
    /// Accepts connections and holds them, forwarding nothing either way.
    Blackhole,
    /// Forwards client-to-node bytes; drops node-to-client bytes.
    SwallowAnswers,
}

/// A proxy; dropping it stops it and closes every connection.
pub struct Proxy {
    pub addr: SocketAddr,
    mode: watch::Sender<Mode>,
    task: JoinHandle<()>,
}

impl Proxy {
    pub async fn start(target: SocketAddr, mode: Mode) -> anyhow::Result<Proxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (tx, rx) = watch::channel(mode);
        let task = tokio::spawn(async move {
            let mut conns = tokio::task::JoinSet::new();
            while let Ok((inbound, _)) = listener.accept().await {
                conns.spawn(serve(inbound, target, rx.clone()));
            }
        });
        Ok(Proxy {
            addr,
            mode: tx,
            task,
        })
    }

    pub fn set_mode(&self, mode: Mode) {
        self.mode.send_replace(mode);
    }

    pub fn endpoint(&self) -> String {
        self.addr.to_string()
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        // Aborting the accept loop drops its JoinSet, which aborts every connection task.
        self.task.abort();
    }
}

async fn serve(mut inbound: TcpStream, target: SocketAddr, mut mode: watch::Receiver<Mode>) {
    if *mode.borrow_and_update() == Mode::Blackhole {
        return hold(inbound).await;
    }
    let Ok(outbound) = TcpStream::connect(target).await else {
        return;
    };
    let (mut ci, mut co) = inbound.split();
    let (mut si, mut so) = {
        let (r, w) = outbound.into_split();
        (r, w)
    };
    let mut up = [0u8; 16 * 1024];
    let mut down = [0u8; 16 * 1024];
    loop {
        let m = *mode.borrow_and_update();
        if m == Mode::Blackhole {
            break;
        }
        tokio::select! {
            r = ci.read(&mut up) => match r {
                Ok(0) | Err(_) => return,
                Ok(n) => if so.write_all(&up[..n]).await.is_err() { return },
            },
            r = si.read(&mut down) => match r {
                Ok(0) | Err(_) => return,
                Ok(n) => if m == Mode::Forward && co.write_all(&down[..n]).await.is_err() { return },
            },
            changed = mode.changed() => if changed.is_err() { return },
        }
    }
    drop((si, so));
    hold(inbound).await;
}

/// Keeps a connection open and silent until the proxy is dropped.
async fn hold(_conn: TcpStream) {
    std::future::pending::<()>().await
}

/// A client with short timeouts, so tests do not wait on the defaults.
pub fn client(endpoints: Vec<String>, request_timeout: Duration) -> anyhow::Result<Client> {
    Ok(Client::with_config(
        endpoints,
        ClientConfig {
            request_timeout,
            retry_budget: Duration::from_secs(15),
            connect_timeout: Duration::from_millis(500),
            ..ClientConfig::default()
        },
    )?)
}

/// Every node's address as an endpoint, the given node first.
pub fn endpoints_first(
    addrs: &std::collections::BTreeMap<u64, SocketAddr>,
    first: u64,
) -> Vec<String> {
    let mut v = vec![addrs[&first].to_string()];
    v.extend(
        addrs
            .iter()
            .filter(|(id, _)| **id != first)
            .map(|(_, a)| a.to_string()),
    );
    v
}
