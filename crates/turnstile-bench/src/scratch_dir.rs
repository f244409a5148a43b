//! `ScratchDir`: one cluster's directory (data dirs and node logs) inside the run's temp dir,
//! removed when the cluster is dropped; its `*.log` files are copied out first when asked.

use std::path::{Path, PathBuf};

use anyhow::Context;

/// A directory removed on drop.
pub struct ScratchDir {
    path: PathBuf,
    keep_logs_in: Option<PathBuf>,
}

impl ScratchDir {
    /// Creates `path` (which must not exist yet).
    pub fn create(path: PathBuf, keep_logs_in: Option<PathBuf>) -> anyhow::Result<ScratchDir> {
        std::fs::create_dir(&path).with_context(|| format!("cannot create {}", path.display()))?;
        Ok(ScratchDir { path, keep_logs_in })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn copy_logs(&self, to: &Path) -> std::io::Result<()> {
        std::fs::create_dir_all(to)?;
        let prefix = self
            .path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        for entry in std::fs::read_dir(&self.path)? {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.ends_with(".log") {
                std::fs::copy(entry.path(), to.join(format!("{prefix}-{name}")))?;
            }
        }
        Ok(())
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        if let Some(to) = &self.keep_logs_in {
            if let Err(e) = self.copy_logs(to) {
                eprintln!(
                    "turnstile-bench: cannot keep logs of {}: {e}",
                    self.path.display()
                );
            }
        }
        if let Err(e) = std::fs::remove_dir_all(&self.path) {
            eprintln!(
                "turnstile-bench: cannot remove {}: {e}",
                self.path.display()
            );
        }
    }
}
