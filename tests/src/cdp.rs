//! A small Chrome DevTools Protocol client for the dashboard test: starts headless Chromium
//! (Debian's `chromium`) on a throwaway profile, opens one page, evaluates JavaScript in it and
//! takes screenshots, over the browser's DevTools WebSocket.
//!
//! Four protocol methods are all the test needs. The CDP client crates (chromiumoxide,
//! headless_chrome) compile thousands of generated protocol types, minutes of a 2-core CI run
//! for those four calls.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{anyhow, bail, Context};
use base64::Engine;
use futures::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

/// Longest wait for the browser to start and open its DevTools port.
const LAUNCH_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest wait for one protocol call's answer.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// Between two evaluations of a condition the test waits on.
const POLL_INTERVAL: Duration = Duration::from_millis(100);
/// Largest protocol message read (a full-page screenshot is the largest).
const MESSAGE_BYTES_MAX: usize = 64 * 1024 * 1024;
/// Longest wait, when a browser is dropped, for it to exit after it was killed.
const EXIT_WAIT: Duration = Duration::from_secs(5);

/// The Chromium binary: `TURNSTILE_CHROMIUM`, else the first of the usual names on `PATH`.
pub fn chromium() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("TURNSTILE_CHROMIUM") {
        return Some(PathBuf::from(p));
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .flat_map(|dir| ["chromium", "chromium-browser", "google-chrome"].map(|n| dir.join(n)))
        .find(|p| p.is_file())
}

/// One headless browser with one page. Dropping it kills the browser and its helper processes,
/// then removes its profile.
pub struct Browser {
    child: tokio::process::Child,
    _profile: tempfile::TempDir,
    ws: WebSocketStream<MaybeTlsStream<TcpStream>>,
    session: String,
    next_id: u64,
}

impl Browser {
    /// Starts `binary` headless and opens a blank page. `args` are extra command-line flags.
    pub async fn launch(binary: &Path, args: &[&str]) -> anyhow::Result<Browser> {
        let profile = tempfile::tempdir()?;
        let tmp = profile.path().join("tmp");
        std::fs::create_dir(&tmp)?;
        let mut cmd = tokio::process::Command::new(binary);
        cmd.args([
            "--headless=new",
            // Tests run as root in CI, where Chromium's sandbox cannot start.
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-extensions",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--window-size=1440,1000",
            "--remote-debugging-address=127.0.0.1",
            "--remote-debugging-port=0",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(args)
        // Chromium's own temp files go inside the profile, which is removed with it.
        .env("TMPDIR", &tmp)
        // The browser and every helper it starts form one group, killed together.
        .process_group(0)
        .arg("about:blank")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
        let mut child = cmd
            .spawn()
            .with_context(|| format!("starting {}", binary.display()))?;
        // The browser writes its port and the browser target's path here once it listens.
        let port_file = profile.path().join("DevToolsActivePort");
        let deadline = tokio::time::Instant::now() + LAUNCH_TIMEOUT;
        let ws_url = loop {
            if let Ok(text) = std::fs::read_to_string(&port_file) {
                let mut lines = text.lines();
                if let (Some(port), Some(path)) = (lines.next(), lines.next()) {
                    break format!("ws://127.0.0.1:{port}{path}");
                }
            }
            if let Some(status) = child.try_wait()? {
                bail!(
                    "{} exited with {status} before it listened",
                    binary.display()
                );
            }
            if tokio::time::Instant::now() >= deadline {
                bail!(
                    "{} did not open its DevTools port in {LAUNCH_TIMEOUT:?}",
                    binary.display()
                );
            }
            tokio::time::sleep(POLL_INTERVAL).await;
        };
        let config = tokio_tungstenite::tungstenite::protocol::WebSocketConfig::default()
            .max_message_size(Some(MESSAGE_BYTES_MAX))
            .max_frame_size(Some(MESSAGE_BYTES_MAX));
        let (ws, _) =
            tokio_tungstenite::connect_async_with_config(ws_url.as_str(), Some(config), false)
                .await
                .with_context(|| format!("connecting to {ws_url}"))?;
        let mut browser = Browser {
            child,
            _profile: profile,
            ws,
            session: String::new(),
            next_id: 1,
        };
        let target = browser
            .call("Target.createTarget", json!({"url": "about:blank"}))
            .await?;
        let target_id = target["targetId"].as_str().context("targetId")?.to_string();
        let attached = browser
            .call(
                "Target.attachToTarget",
                json!({"targetId": target_id, "flatten": true}),
            )
            .await?;
        browser.session = attached["sessionId"]
            .as_str()
            .context("sessionId")?
            .to_string();
        Ok(browser)
    }

    /// Sends one command (to the page once attached) and returns its `result`, skipping the
    /// events that arrive meanwhile.
    async fn call(&mut self, method: &str, params: Value) -> anyhow::Result<Value> {
        let id = self.next_id;
        self.next_id += 1;
        let mut msg = json!({"id": id, "method": method, "params": params});
        if !self.session.is_empty() {
            msg["sessionId"] = json!(self.session);
        }
        self.ws.send(Message::text(msg.to_string())).await?;
        let answer = tokio::time::timeout(CALL_TIMEOUT, async {
            while let Some(frame) = self.ws.next().await {
                let Message::Text(text) = frame? else {
                    continue;
                };
                let v: Value = serde_json::from_str(text.as_str())?;
                if v["id"] == json!(id) {
                    return Ok(v);
                }
            }
            Err(anyhow!("the browser closed the DevTools connection"))
        })
        .await
        .map_err(|_| anyhow!("{method}: no answer in {CALL_TIMEOUT:?}"))??;
        if let Some(e) = answer.get("error") {
            bail!("{method}: {e}");
        }
        Ok(answer["result"].clone())
    }

    /// Loads `url` in the page.
    pub async fn navigate(&mut self, url: &str) -> anyhow::Result<()> {
        let r = self.call("Page.navigate", json!({"url": url})).await?;
        if let Some(e) = r.get("errorText") {
            bail!("navigating to {url}: {e}");
        }
        Ok(())
    }

    /// The value of the JavaScript expression `expr` in the page (promises awaited).
    pub async fn eval(&mut self, expr: &str) -> anyhow::Result<Value> {
        let r = self
            .call(
                "Runtime.evaluate",
                json!({"expression": expr, "returnByValue": true, "awaitPromise": true}),
            )
            .await?;
        if let Some(e) = r.get("exceptionDetails") {
            bail!("{expr}: threw {e}");
        }
        Ok(r["result"]["value"].clone())
    }

    /// Evaluates `expr` until it is truthy (not null, false, 0 or ""), and returns that value.
    pub async fn wait_until(
        &mut self,
        what: &str,
        expr: &str,
        timeout: Duration,
    ) -> anyhow::Result<Value> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let v = self.eval(expr).await?;
            let truthy = match &v {
                Value::Null | Value::Bool(false) => false,
                Value::Number(n) => n.as_f64() != Some(0.0),
                Value::String(s) => !s.is_empty(),
                _ => true,
            };
            if truthy {
                return Ok(v);
            }
            if tokio::time::Instant::now() >= deadline {
                bail!("{what}: not so after {timeout:?}; `{expr}` was {v}");
            }
            tokio::time::sleep(POLL_INTERVAL).await;
        }
    }

    /// A PNG of the whole page.
    pub async fn screenshot(&mut self) -> anyhow::Result<Vec<u8>> {
        let r = self
            .call(
                "Page.captureScreenshot",
                json!({"format": "png", "captureBeyondViewport": true}),
            )
            .await?;
        let data = r["data"].as_str().context("screenshot data")?;
        Ok(base64::engine::general_purpose::STANDARD.decode(data)?)
    }
}

impl Drop for Browser {
    /// Kills the whole process group and waits for the browser itself, so the profile is
    /// removed after nothing writes to it. (Killing only the browser left its helpers running
    /// for a moment: they recreated `Default/` in the removed profile, and Chromium's own
    /// temp dir stayed in /tmp.)
    fn drop(&mut self) {
        if let Some(pid) = self.child.id().and_then(|id| i32::try_from(id).ok()) {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        let deadline = std::time::Instant::now() + EXIT_WAIT;
        while std::time::Instant::now() < deadline {
            match self.child.try_wait() {
                Ok(None) => std::thread::sleep(POLL_INTERVAL / 10),
                Ok(Some(_)) | Err(_) => break,
            }
        }
    }
}
