//! Splitting Mosquitto text into lines of `key` + value, following `include_dir`.

use super::MosquittoError;
use std::path::Path;
use std::sync::Arc;

/// One setting: where it is, its key and its value (the rest of the line, trimmed).
#[derive(Debug, Clone)]
pub(super) struct Line {
    /// The file it comes from.
    pub file: Arc<str>,
    /// 1-based line number in that file.
    pub number: usize,
    /// The key (first word).
    pub key: String,
    /// Everything after the key, trimmed ("" when there is nothing).
    pub value: String,
}

impl Line {
    /// An error about this line.
    pub fn error(&self, message: impl Into<String>) -> MosquittoError {
        MosquittoError::Line {
            file: self.file.to_string(),
            line: self.number,
            key: self.key.clone(),
            message: message.into(),
        }
    }

    /// The value's whitespace-separated words, up to a word that starts with `#` after the
    /// first (Mosquitto reads such a word as the start of a trailing comment; the first word
    /// may be `#`, the topic filter).
    pub fn words(&self) -> Vec<&str> {
        let mut words = self.value.split_whitespace();
        let first = words.next();
        first
            .into_iter()
            .chain(words.take_while(|w| !w.starts_with('#')))
            .collect()
    }

    /// The value, which must not be empty.
    pub fn string(&self) -> Result<&str, MosquittoError> {
        if self.value.is_empty() {
            return Err(self.error("a value is required"));
        }
        Ok(&self.value)
    }

    /// A single word value.
    pub fn word(&self) -> Result<&str, MosquittoError> {
        match self.words().as_slice() {
            [word] => Ok(word),
            [] => Err(self.error("a value is required")),
            _ => Err(self.error(format!("one value expected, got {:?}", self.value))),
        }
    }

    /// `true` or `false` (or, as Mosquitto also reads them, `1` or `0`).
    pub fn boolean(&self) -> Result<bool, MosquittoError> {
        match self.word()? {
            "true" | "1" => Ok(true),
            "false" | "0" => Ok(false),
            other => Err(self.error(format!("expected true or false, got {other:?}"))),
        }
    }

    /// A whole number (Mosquitto allows a sign; callers check the range).
    pub fn integer(&self) -> Result<i64, MosquittoError> {
        let word = self.word()?;
        word.parse::<i64>()
            .map_err(|_| self.error(format!("expected a whole number, got {word:?}")))
    }

    /// A whole number within `min..=max`.
    pub fn integer_in(&self, min: i64, max: i64) -> Result<i64, MosquittoError> {
        let value = self.integer()?;
        if value < min || value > max {
            return Err(self.error(format!("{value} is out of range {min}..={max}")));
        }
        Ok(value)
    }
}

/// Reads a main file and the files its `include_dir` lines name.
pub(super) fn read_file(path: &Path) -> Result<Vec<Line>, MosquittoError> {
    let text = read(path)?;
    read_text(&text, &path.display().to_string(), true)
}

/// Splits `text`; `main` allows `include_dir` (Mosquitto honours it in the main file only).
pub(super) fn read_text(text: &str, origin: &str, main: bool) -> Result<Vec<Line>, MosquittoError> {
    let file: Arc<str> = Arc::from(origin);
    let mut lines = Vec::new();
    for (index, raw) in text.lines().enumerate() {
        let trimmed = raw.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let (key, value) = match trimmed.split_once(char::is_whitespace) {
            Some((key, value)) => (key, value.trim()),
            None => (trimmed, ""),
        };
        let line = Line {
            file: file.clone(),
            number: index + 1,
            key: key.to_string(),
            value: value.to_string(),
        };
        if line.key == "include_dir" {
            if !main {
                return Err(line.error("allowed in the main configuration file only"));
            }
            lines.extend(include_dir(&line)?);
        } else {
            lines.push(line);
        }
    }
    Ok(lines)
}

/// The lines of every `*.conf` file in the directory, in Mosquitto's order.
fn include_dir(line: &Line) -> Result<Vec<Line>, MosquittoError> {
    let dir = Path::new(line.string()?);
    let entries =
        std::fs::read_dir(dir).map_err(|e| line.error(format!("{}: {e}", dir.display())))?;
    let mut files = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| line.error(format!("{}: {e}", dir.display())))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let is_file = entry.file_type().map(|t| !t.is_dir()).unwrap_or(false);
        if is_file && name.ends_with(".conf") {
            files.push(name);
        }
    }
    sort_like_mosquitto(&mut files);
    let mut lines = Vec::new();
    for name in files {
        let path = dir.join(&name);
        let text = read(&path)?;
        lines.extend(read_text(&text, &path.display().to_string(), false)?);
    }
    Ok(lines)
}

/// Mosquitto's include order: alphabetical ignoring case, and where two names differ only in
/// case, the upper case letter first (`A.conf` before `a.conf` before `B.conf`).
fn sort_like_mosquitto(names: &mut [String]) {
    names.sort_by(|a, b| {
        a.to_lowercase()
            .cmp(&b.to_lowercase())
            .then_with(|| a.cmp(b))
    });
}

fn read(path: &Path) -> Result<String, MosquittoError> {
    std::fs::read_to_string(path).map_err(|source| MosquittoError::Read {
        path: path.display().to_string(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comments_blank_lines_and_whitespace() {
        let text = "# comment\n\n   \n  # indented comment\nport 1883\r\nlog_dest  file /var/log/a b.log  \n";
        let lines = read_text(text, "t.conf", true).unwrap();
        assert_eq!(lines.len(), 2);
        assert_eq!((lines[0].number, lines[0].key.as_str()), (5, "port"));
        assert_eq!(lines[0].value, "1883");
        assert_eq!(lines[1].value, "file /var/log/a b.log");
        assert_eq!(lines[1].words(), ["file", "/var/log/a", "b.log"]);
    }

    #[test]
    fn trailing_comments_end_the_words_of_a_line() {
        let text = "allow_anonymous true # for tests
topic # both 0 #all
listener 1883 #main
";
        let lines = read_text(text, "t.conf", true).unwrap();
        assert!(lines[0].boolean().unwrap());
        assert_eq!(lines[1].words(), ["#", "both", "0"]);
        assert_eq!(lines[2].words(), ["1883"]);
    }

    #[test]
    fn include_order_follows_mosquitto_documentation() {
        let mut names: Vec<String> = ["b.conf", "A.conf", "01.conf", "a.conf", "B.conf", "00.conf"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        sort_like_mosquitto(&mut names);
        assert_eq!(
            names,
            ["00.conf", "01.conf", "A.conf", "a.conf", "B.conf", "b.conf"]
        );
    }

    #[test]
    fn include_dir_reads_conf_files_in_order_and_only_from_the_main_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("b.conf"), "max_keepalive 30\n").unwrap();
        std::fs::write(dir.path().join("A.conf"), "\nsys_interval 5\n").unwrap();
        std::fs::write(dir.path().join("README"), "not a conf file\n").unwrap();
        let text = format!(
            "port 1883\ninclude_dir {}\nmax_qos 1\n",
            dir.path().display()
        );
        let lines = read_text(&text, "main.conf", true).unwrap();
        let keys: Vec<&str> = lines.iter().map(|l| l.key.as_str()).collect();
        assert_eq!(keys, ["port", "sys_interval", "max_keepalive", "max_qos"]);
        assert!(lines[1].file.ends_with("A.conf"));
        assert_eq!(lines[1].number, 2);

        let error = read_text(&text, "inc.conf", false).unwrap_err().to_string();
        assert!(error.contains("inc.conf:2: include_dir"), "{error}");
    }

    #[test]
    fn missing_include_dir_is_an_error_naming_the_line() {
        let error = read_text("include_dir /nonexistent/hayate-test\n", "m.conf", true)
            .unwrap_err()
            .to_string();
        assert!(error.starts_with("m.conf:1: include_dir:"), "{error}");
    }

    #[test]
    fn value_helpers_check_their_input() {
        let lines = read_text("a true\nb maybe\nc 12\nd x y\ne\n", "t", true).unwrap();
        assert!(lines[0].boolean().unwrap());
        assert!(lines[1]
            .boolean()
            .unwrap_err()
            .to_string()
            .contains("t:2: b"));
        assert_eq!(lines[2].integer_in(0, 20).unwrap(), 12);
        assert!(lines[2].integer_in(0, 5).is_err());
        assert!(lines[3].word().is_err());
        assert!(lines[4].string().is_err());
    }
}
