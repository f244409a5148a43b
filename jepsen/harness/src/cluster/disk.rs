//! Disk faults of a [`ProcCluster`] started with `disk_faults`: every node process runs under
//! `fiu-run -x` (libfiu, Debian's `fiu-utils`), whose preloaded library can fail the node's
//! POSIX I/O calls (`fdatasync`, `pwrite`, ...) on command, through a pair of named pipes per
//! process that `fiu-ctrl` writes to. Nothing is mocked: the node's real syscall wrapper returns
//! the error (`EIO` for the sync points), exactly as a failing disk would make it.
//!
//! Only the netns backend, and only a dynamically linked node binary (a static one ignores
//! `LD_PRELOAD`), which the `cargo test` build is.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};

use anyhow::{anyhow, bail, Context};

use super::{Place, ProcCluster};

/// The program that starts a node with libfiu preloaded.
pub const FIU_RUN: &str = "fiu-run";
/// The program that switches a running node's failure points.
const FIU_CTRL: &str = "fiu-ctrl";

/// Fails (never skips) when libfiu's tools are missing: CI installs them.
pub fn require_fiu() -> anyhow::Result<()> {
    for tool in [FIU_RUN, FIU_CTRL] {
        let found = Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false);
        if !found {
            bail!("{tool} is not installed; the disk-fault stories need libfiu's tools: apt-get install -y fiu-utils (CI installs it)");
        }
    }
    Ok(())
}

impl ProcCluster {
    /// The named-pipe prefix of node `id`'s libfiu remote control.
    fn fiu_prefix(&self, id: u64) -> PathBuf {
        self.opts.dir.join(format!("fiu-n{id}"))
    }

    /// `fiu-run -x -f PREFIX BINARY` and then the node's own arguments, when the cluster runs
    /// with disk faults; `None` otherwise.
    pub(super) fn fiu_wrapper(&self, id: u64, binary: &Path) -> Option<Vec<OsString>> {
        if !self.opts.disk_faults {
            return None;
        }
        Some(vec![
            "-x".into(),
            "-f".into(),
            self.fiu_prefix(id).into_os_string(),
            binary.as_os_str().to_owned(),
        ])
    }

    /// Turns libfiu failure point `point` (e.g. `posix/io/sync/fdatasync`) on or off in node
    /// `id`'s process. With it on, every call through that point fails.
    pub fn disk_fault(&self, id: u64, point: &str, on: bool) -> anyhow::Result<()> {
        if !self.opts.disk_faults {
            bail!("the cluster was started without disk_faults");
        }
        let pid = self
            .pid(id)
            .ok_or_else(|| anyhow!("node {id} is not running"))?;
        let verb = if on { "enable" } else { "disable" };
        let out = Command::new(FIU_CTRL)
            .arg("-f")
            .arg(self.fiu_prefix(id))
            .args(["-c", &format!("{verb} name={point}")])
            .arg(pid.to_string())
            .output()
            .with_context(|| format!("cannot run {FIU_CTRL}"))?;
        if !out.status.success() {
            bail!(
                "{FIU_CTRL} {verb} {point} on node {id} failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(())
    }

    /// If node `id`'s process has exited by itself, reaps it and returns its status; the node
    /// then counts as stopped, so [`ProcCluster::restart`] starts it again.
    pub fn exited(&mut self, id: u64) -> anyhow::Result<Option<ExitStatus>> {
        let node = self
            .nodes
            .get_mut(&id)
            .ok_or_else(|| anyhow!("no node {id}"))?;
        let Place::Netns { child, .. } = &mut node.place else {
            bail!("exited is implemented for the netns backend only");
        };
        let Some(proc) = child.as_mut() else {
            return Ok(None);
        };
        let status = proc.try_wait().context("cannot poll a node process")?;
        if status.is_some() {
            *child = None;
        }
        Ok(status)
    }
}
