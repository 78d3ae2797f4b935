//! Words quoted as bash's `printf %q` quotes them: the QEMU command line
//! and the command a log records are printed this way, so a user can paste
//! them back into a shell, and tools that read `--dry-run` output get the
//! bytes run-qemu.sh has always printed.

/// Characters bash's `%q` escapes with a backslash anywhere in a word.
const BACKSLASHED: &[u8] = b" \t\n!\"$&'()*,;<>?[\\]^`{|}";

/// `word` as `printf %q` prints it (bash 5, UTF-8 locale).
pub fn quote(word: &str) -> String {
    if word.is_empty() {
        return "''".into();
    }
    if word.chars().any(char::is_control) {
        return ansi_c(word);
    }
    let mut out = String::with_capacity(word.len() + 8);
    let mut prev = None;
    for (i, c) in word.chars().enumerate() {
        let escape = match c {
            c if c.is_ascii() && BACKSLASHED.contains(&(c as u8)) => true,
            // A comment at a word's start; a tilde where it would expand.
            '#' => i == 0,
            '~' => i == 0 || matches!(prev, Some(':' | '=')),
            _ => false,
        };
        if escape {
            out.push('\\');
        }
        out.push(c);
        prev = Some(c);
    }
    out
}

/// `$'…'` quoting, for words with control characters.
fn ansi_c(word: &str) -> String {
    let mut out = String::from("$'");
    for c in word.chars() {
        match c {
            '\x07' => out.push_str("\\a"),
            '\x08' => out.push_str("\\b"),
            '\x1b' => out.push_str("\\E"),
            '\x0c' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\x0b' => out.push_str("\\v"),
            '\\' => out.push_str("\\\\"),
            '\'' => out.push_str("\\'"),
            c if c.is_control() && c.is_ascii() => out.push_str(&format!("\\{:03o}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

/// `words` quoted and joined as `printf '%q ' WORDS...` prints them (with
/// its trailing space).
pub fn quote_words<S: AsRef<str>>(words: &[S]) -> String {
    words.iter().map(|w| quote(w.as_ref()) + " ").collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    /// Every case against bash itself.
    #[test]
    fn quotes_as_bash_printf_q() {
        let words = [
            "",
            "plain-word_1.2/x",
            "a b",
            "c$d",
            "e'f",
            "~x",
            "a=~b",
            "a:~b",
            "x~y",
            "#c",
            "c#",
            "%+@=:",
            "name=opt/memboot/cmdline,string=a,,b",
            "tab\there",
            "ctl\x01\x7f",
            "\x1b\x07\x08\x0c\n\r\x0b",
            "it's \\ x\n",
            "é",
            "é\t",
        ];
        let out = Command::new("bash")
            .arg("-c")
            .arg("printf '%q\\0' \"$@\"")
            .arg("bash")
            .args(words)
            .env("LC_ALL", "C.UTF-8")
            .output()
            .expect("bash (run-qemu.sh's own shell)");
        let bash = String::from_utf8(out.stdout).unwrap();
        let bash: Vec<&str> = bash.split_terminator('\0').collect();
        assert_eq!(bash.len(), words.len());
        for (word, want) in words.iter().zip(bash) {
            assert_eq!(quote(word), want, "{word:?}");
        }
    }

    #[test]
    fn words_end_with_a_space() {
        assert_eq!(quote_words(&["a", "b c"]), "a b\\ c ");
    }
}
