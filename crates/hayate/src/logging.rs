//! Logging: the filter (`--log-level`), the line format (`--log-format text|json`) and the
//! destination (standard error, or `--log-file PATH`, reopened on SIGHUP for logrotate).

use anyhow::Context as _;
use hayate_server::LogFormat;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// A log file that can be reopened under its name (after logrotate renamed it).
#[derive(Clone, Debug)]
pub struct LogFile {
    path: PathBuf,
    file: Arc<Mutex<File>>,
}

impl LogFile {
    fn open(path: &Path) -> io::Result<File> {
        OpenOptions::new().create(true).append(true).open(path)
    }

    /// Opens (creates, appends to) `path`.
    pub fn new(path: &Path) -> io::Result<LogFile> {
        Ok(LogFile {
            path: path.to_path_buf(),
            file: Arc::new(Mutex::new(Self::open(path)?)),
        })
    }

    /// Opens the file under its name again; later lines go there. On error the old file is
    /// kept.
    pub fn reopen(&self) -> io::Result<()> {
        let file = Self::open(&self.path)?;
        *self
            .file
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = file;
        Ok(())
    }
}

impl Write for &LogFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        // One event is one write of its whole line (the formatter buffers it), so lines from
        // several threads never interleave.
        let mut file = self.file.lock().unwrap_or_else(|p| p.into_inner());
        file.write_all(buf)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.lock().unwrap_or_else(|p| p.into_inner()).flush()
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogFile {
    type Writer = &'a LogFile;

    fn make_writer(&'a self) -> Self::Writer {
        self
    }
}

/// Installs the global subscriber. Returns the log file, to reopen on SIGHUP.
pub fn init(
    level: &str,
    format: LogFormat,
    file: Option<&Path>,
) -> anyhow::Result<Option<LogFile>> {
    // rustls warns about every client that sends an IP address as SNI (mosquitto_pub does):
    // one log line per connection that any client can cause. Keep its errors only, unless the
    // filter says otherwise.
    let level = if level.contains("rustls") {
        level.to_string()
    } else {
        format!("{level},rustls=error")
    };
    let filter = tracing_subscriber::EnvFilter::try_new(&level)
        .with_context(|| format!("invalid log level {level:?}"))?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false);
    let log_file = file
        .map(|path| {
            LogFile::new(path).with_context(|| format!("opening log file {}", path.display()))
        })
        .transpose()?;
    match (format, log_file.clone()) {
        (LogFormat::Text, None) => builder.init(),
        (LogFormat::Json, None) => builder.json().init(),
        (LogFormat::Text, Some(file)) => builder.with_ansi(false).with_writer(file).init(),
        (LogFormat::Json, Some(file)) => builder.json().with_writer(file).init(),
    }
    Ok(log_file)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reopen_follows_the_name_after_a_rename() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hayate.log");
        let log = LogFile::new(&path).unwrap();
        (&log).write_all(b"one\n").unwrap();
        std::fs::rename(&path, dir.path().join("hayate.log.1")).unwrap();
        (&log).write_all(b"two\n").unwrap();
        log.reopen().unwrap();
        (&log).write_all(b"three\n").unwrap();
        let rotated = std::fs::read_to_string(dir.path().join("hayate.log.1")).unwrap();
        assert_eq!(rotated, "one\ntwo\n");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "three\n");
    }
}
