//! Owner records of the networks a run creates: `<state dir>/<index>` holds the pid of the
//! process that created network `index`, so a later run (or `turnstile-jepsen cleanup`) can
//! find and remove what a run killed outright left behind.

use std::path::Path;

use anyhow::Context;

/// Records this process as the owner of network `index`.
pub fn record(dir: &str, index: u32) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).context("cannot create the state dir")?;
    std::fs::write(
        Path::new(dir).join(index.to_string()),
        std::process::id().to_string(),
    )
    .context("cannot record the network's owner")
}

/// Removes the owner record of network `index`.
pub fn forget(dir: &str, index: u32) {
    let _ = std::fs::remove_file(Path::new(dir).join(index.to_string()));
}

/// Indexes of the networks whose owner is gone (or unreadable).
pub fn orphaned(dir: &str) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut orphans = Vec::new();
    for entry in entries.flatten() {
        let Some(index) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let owner = std::fs::read_to_string(entry.path())
            .ok()
            .and_then(|s| s.trim().parse::<i32>().ok());
        if !owner.is_some_and(pid_alive) {
            orphans.push(index);
        }
    }
    orphans
}

fn pid_alive(pid: i32) -> bool {
    // Signal 0 checks existence; EPERM would also mean alive, but we run as root.
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_ok()
}
