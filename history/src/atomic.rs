//! Files written atomically: everything goes to a temporary file beside the target, which is
//! renamed over it only when complete, so an interrupted run leaves no half-written file.

use std::io::Write;
use std::path::{Path, PathBuf};

/// A file written atomically: everything goes to a temporary file beside it, which is renamed
/// over the target only when complete, so an interrupted run leaves no half-written file.
pub struct AtomicFile {
    target: PathBuf,
    temporary: PathBuf,
    file: std::fs::File,
}

impl AtomicFile {
    /// Opens the temporary file now, so that an unwritable target fails before any work.
    pub fn create(target: &Path) -> std::io::Result<AtomicFile> {
        let name = target.file_name().ok_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("{} is not a file name", target.display()))
        })?;
        let mut temporary_name = std::ffi::OsString::from(".");
        temporary_name.push(name);
        temporary_name.push(format!(".tmp{}", std::process::id()));
        let temporary = target.with_file_name(temporary_name);
        let file = std::fs::File::create(&temporary)?;
        Ok(AtomicFile { target: target.to_path_buf(), temporary, file })
    }

    /// Writes `bytes` and renames the file into place.
    pub fn commit(mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.file.write_all(bytes)?;
        self.file.sync_all()?;
        std::fs::rename(&self.temporary, &self.target)
    }
}

impl Drop for AtomicFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.temporary);
    }
}

/// Writes `bytes` to `target` atomically.
pub fn write(target: &Path, bytes: &[u8]) -> std::io::Result<()> {
    AtomicFile::create(target)?.commit(bytes)
}
