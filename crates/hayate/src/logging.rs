//! Logging: the filter (`--log-level`), the line format (`--log-format text|json`) and the
//! destination (standard error, or `--log-file PATH`, reopened on SIGHUP for logrotate).

use anyhow::Context as _;
use hayate_server::LogFormat;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::{fmt, reload, EnvFilter, Layer, Registry};

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

/// The registry with the reloadable filter, which the output layer sits on.
type Filtered = tracing_subscriber::layer::Layered<reload::Layer<EnvFilter, Registry>, Registry>;

/// What a SIGHUP changes in logging: the file is reopened, the filter replaced.
pub struct Logging {
    file: Option<LogFile>,
    filter: reload::Handle<EnvFilter, Registry>,
    level: String,
}

impl Logging {
    /// Reopens the log file under its name (logrotate moved it), if logging to a file.
    pub fn reopen(&self) -> io::Result<()> {
        self.file.as_ref().map_or(Ok(()), LogFile::reopen)
    }

    /// Applies `level` if it differs from the level in force; an invalid one is refused and
    /// the old one kept.
    pub fn set_level(&mut self, level: &str) -> anyhow::Result<bool> {
        if level == self.level {
            return Ok(false);
        }
        self.filter.reload(filter(level)?)?;
        self.level = level.to_string();
        Ok(true)
    }
}

/// The filter for `level`. rustls warns about every client that sends an IP address as SNI
/// (mosquitto_pub does): one log line per connection that any client can cause. Its errors
/// only, unless the level says otherwise.
fn filter(level: &str) -> anyhow::Result<EnvFilter> {
    let level = if level.contains("rustls") {
        level.to_string()
    } else {
        format!("{level},rustls=error")
    };
    EnvFilter::try_new(&level).with_context(|| format!("invalid log level {level:?}"))
}

/// Installs the global subscriber: `level` as its filter (replaceable on SIGHUP), lines as
/// text or JSON, to standard error or `file`.
pub fn init(level: &str, format: LogFormat, file: Option<&Path>) -> anyhow::Result<Logging> {
    let (filter_layer, handle) = reload::Layer::new(filter(level)?);
    let log_file = file
        .map(|path| {
            LogFile::new(path).with_context(|| format!("opening log file {}", path.display()))
        })
        .transpose()?;
    let output: Box<dyn Layer<Filtered> + Send + Sync> = match (format, log_file.clone()) {
        (LogFormat::Text, None) => fmt::layer().with_target(false).boxed(),
        (LogFormat::Json, None) => fmt::layer().json().with_target(false).boxed(),
        (LogFormat::Text, Some(file)) => fmt::layer()
            .with_target(false)
            .with_ansi(false)
            .with_writer(file)
            .boxed(),
        (LogFormat::Json, Some(file)) => fmt::layer()
            .json()
            .with_target(false)
            .with_writer(file)
            .boxed(),
    };
    // The reloadable filter sits directly on the registry (its handle's type says so); the
    // output layer on top of it.
    tracing_subscriber::registry()
        .with(filter_layer)
        .with(output)
        .try_init()
        .context("installing the log subscriber")?;
    Ok(Logging {
        file: log_file,
        filter: handle,
        level: level.to_string(),
    })
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
