//! `Machine`: the facts about this machine printed above the table (cores, CPU model, memory,
//! kernel, the filesystem the data dirs are on, etcd's version), read from /proc and `etcd`.

use std::path::Path;
use std::process::Command;

/// What the table was measured on.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Machine {
    pub cpus: usize,
    pub cpu_model: String,
    pub mem_gib: f64,
    pub kernel: String,
    /// Device and filesystem type of the mount holding the data dirs.
    pub data_fs: String,
    pub etcd_version: Option<String>,
    /// `/proc/loadavg` when the run started: other work on the machine skews every figure.
    pub loadavg_start: String,
}

impl Machine {
    /// The two report lines every output starts with: the machine, and the load average at the
    /// run's start and end.
    pub fn markdown_lines(&self, loadavg_end: &str) -> String {
        format!(
            "- machine: {} CPUs ({}), {:.1} GiB, Linux {}; data dirs on {}\n\
             - load average (1, 5, 15 min) at start: {}; at end: {}\n",
            self.cpus,
            self.cpu_model,
            self.mem_gib,
            self.kernel,
            self.data_fs,
            self.loadavg_start,
            loadavg_end
        )
    }

    pub fn read(work_dir: &Path, etcd_bin: Option<&Path>) -> Machine {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
        Machine {
            cpus: std::thread::available_parallelism().map_or(0, usize::from),
            cpu_model: field(&cpuinfo, "model name").unwrap_or_else(|| "unknown".into()),
            mem_gib: field(&meminfo, "MemTotal")
                .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
                .map_or(0.0, |kib| kib / 1_048_576.0),
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .map(|s| s.trim().to_string())
                .unwrap_or_default(),
            data_fs: mount_of(&mounts, work_dir).unwrap_or_else(|| "unknown".into()),
            etcd_version: etcd_bin.and_then(etcd_version),
            loadavg_start: loadavg(),
        }
    }
}

/// The 1-, 5- and 15-minute load averages.
pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// The value of the first `name : value` line.
fn field(text: &str, name: &str) -> Option<String> {
    text.lines()
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.trim() == name)
        .map(|(_, v)| v.trim().to_string())
}

/// `device (fstype) on mountpoint` of the longest mount point containing `dir`.
fn mount_of(mounts: &str, dir: &Path) -> Option<String> {
    let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    mounts
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            Some((f.next()?, f.next()?, f.next()?))
        })
        .filter(|(_, mp, _)| dir.starts_with(mp))
        .max_by_key(|(_, mp, _)| mp.len())
        .map(|(dev, mp, fs)| format!("{dev} ({fs}) on {mp}"))
}

fn etcd_version(bin: &Path) -> Option<String> {
    let out = Command::new(bin).arg("--version").output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    field(&text, "etcd Version")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_and_mounts() {
        assert_eq!(
            field("model name\t: AMD EPYC\nflags: x\n", "model name").as_deref(),
            Some("AMD EPYC")
        );
        let mounts = "/dev/vda / ext4 rw 0 0\ntmpfs /tmp/x tmpfs rw 0 0\n";
        assert_eq!(
            mount_of(mounts, Path::new("/nonexistent/dir")).as_deref(),
            Some("/dev/vda (ext4) on /")
        );
        assert_eq!(
            mount_of(mounts, Path::new("/tmp/x/y")).as_deref(),
            Some("tmpfs (tmpfs) on /tmp/x")
        );
    }
}
