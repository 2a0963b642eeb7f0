//! Label selectors in configuration (`kubernetes.namespace_selector`,
//! `kubernetes.source_label_selector`), checked at load with the grammar
//! kube-apiserver parses them with (apimachinery's `labels.Parse`), so a typo
//! is a start-up error naming its key rather than an API error at run time.
//! No crate parses the text form: kube's `Selector` is built from expressions.
//!
//! Reloader's older `key:value` items (its `--namespace-selector` and
//! `--resource-label-selector`, with `key:*` for "has the label") are read
//! as Reloader reads them: `key=value`, and `key` for `*`.

/// `text` as kube-apiserver will be sent it: Reloader's `key:value` items
/// translated, the rest as written. `Err` says what is wrong, for a message
/// naming the key.
pub(crate) fn label_selector(text: &str) -> Result<String, String> {
    let translated = from_reloader(text);
    check(&translated)?;
    Ok(translated)
}

/// Reloader's `key:value` and `key:*` / `key=*` items as Kubernetes' form
/// (`key=value`, `key`); other items unchanged. Only items of one word with
/// no parentheses are Reloader's: `:` is in no label key or value.
fn from_reloader(text: &str) -> String {
    if !text.contains(':') && !text.contains("=*") {
        return text.to_owned();
    }
    let mut depth = 0usize;
    let mut items = vec![String::new()];
    for c in text.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                items.push(String::new());
                continue;
            }
            _ => {}
        }
        if let Some(item) = items.last_mut() {
            item.push(c);
        }
    }
    let items: Vec<String> = items.iter().map(|item| reloader_item(item)).collect();
    items.join(",")
}

fn reloader_item(item: &str) -> String {
    let trimmed = item.trim();
    let pair = trimmed
        .split_once(':')
        .or_else(|| trimmed.split_once('=').filter(|(_, value)| *value == "*"));
    match pair {
        Some((key, value)) if !trimmed.contains(['(', ')', ' ', '!']) => {
            if value == "*" {
                key.to_owned()
            } else {
                format!("{key}={value}")
            }
        }
        _ => item.to_owned(),
    }
}

/// Whether `text` parses as a label selector, as `labels.Parse` reads it:
/// requirements separated by `,`, each `key`, `!key`, `key=value`,
/// `key==value`, `key!=value`, `key in (a,b)`, `key notin (a,b)`,
/// `key>1` or `key<1`.
fn check(text: &str) -> Result<(), String> {
    let tokens = tokenize(text);
    let mut at = 0;
    if tokens.is_empty() {
        return Ok(());
    }
    loop {
        at = requirement(&tokens, at)?;
        match tokens.get(at) {
            None => return Ok(()),
            Some(Token::Comma) => at += 1,
            Some(other) => return Err(format!("expected ',' or the end, found {other}")),
        }
    }
}

/// One token of the selector grammar.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Word(String),
    Not,
    Equals,
    DoubleEquals,
    NotEquals,
    Greater,
    Less,
    Open,
    Close,
    Comma,
}

impl std::fmt::Display for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Word(word) => write!(f, "{word:?}"),
            Self::Not => f.write_str("'!'"),
            Self::Equals => f.write_str("'='"),
            Self::DoubleEquals => f.write_str("'=='"),
            Self::NotEquals => f.write_str("'!='"),
            Self::Greater => f.write_str("'>'"),
            Self::Less => f.write_str("'<'"),
            Self::Open => f.write_str("'('"),
            Self::Close => f.write_str("')'"),
            Self::Comma => f.write_str("','"),
        }
    }
}

fn tokenize(text: &str) -> Vec<Token> {
    let mut tokens = Vec::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        let token = match c {
            ' ' | '\t' => continue,
            ',' => Token::Comma,
            '(' => Token::Open,
            ')' => Token::Close,
            '>' => Token::Greater,
            '<' => Token::Less,
            '!' if chars.next_if_eq(&'=').is_some() => Token::NotEquals,
            '!' => Token::Not,
            '=' if chars.next_if_eq(&'=').is_some() => Token::DoubleEquals,
            '=' => Token::Equals,
            _ => {
                let mut word = String::from(c);
                while let Some(next) = chars.next_if(|c| !" \t,()<>!=".contains(*c)) {
                    word.push(next);
                }
                Token::Word(word)
            }
        };
        tokens.push(token);
    }
    tokens
}

/// One requirement from `tokens[at]`; the index after it.
fn requirement(tokens: &[Token], at: usize) -> Result<usize, String> {
    if tokens.get(at) == Some(&Token::Not) {
        let key = word(tokens, at + 1, "a label key after '!'")?;
        check_key(key)?;
        return Ok(at + 2);
    }
    let key = word(tokens, at, "a label key")?;
    check_key(key)?;
    let at = at + 1;
    match tokens.get(at) {
        None | Some(Token::Comma) => Ok(at),
        Some(Token::Equals | Token::DoubleEquals | Token::NotEquals) => {
            let value = optional_word(tokens, at + 1);
            check_value(key, value.unwrap_or(""))?;
            Ok(at + 1 + usize::from(value.is_some()))
        }
        Some(Token::Greater | Token::Less) => {
            let value = word(tokens, at + 1, "a number")?;
            value.parse::<i64>().map_err(|_| {
                format!("the value of {key} after '>' or '<' must be an integer, got {value:?}")
            })?;
            Ok(at + 2)
        }
        Some(Token::Word(operator)) if operator == "in" || operator == "notin" => {
            values(tokens, at + 1, key)
        }
        Some(other) => Err(format!(
            "expected an operator ('=', '==', '!=', 'in', 'notin', '>', '<') after {key:?}, found {other}"
        )),
    }
}

/// `(a,b,…)` from `tokens[at]`; the index after it.
fn values(tokens: &[Token], at: usize, key: &str) -> Result<usize, String> {
    if tokens.get(at) != Some(&Token::Open) {
        return Err(format!(
            "expected '(' after in/notin of {key:?}, found {}",
            shown(tokens.get(at))
        ));
    }
    let mut at = at + 1;
    loop {
        let value = optional_word(tokens, at);
        check_value(key, value.unwrap_or(""))?;
        at += usize::from(value.is_some());
        match tokens.get(at) {
            Some(Token::Comma) => at += 1,
            Some(Token::Close) => return Ok(at + 1),
            other => {
                return Err(format!(
                    "expected ',' or ')' in the values of {key:?}, found {}",
                    shown(other)
                ));
            }
        }
    }
}

fn word<'a>(tokens: &'a [Token], at: usize, what: &str) -> Result<&'a str, String> {
    optional_word(tokens, at)
        .ok_or_else(|| format!("expected {what}, found {}", shown(tokens.get(at))))
}

fn optional_word(tokens: &[Token], at: usize) -> Option<&str> {
    match tokens.get(at) {
        Some(Token::Word(word)) => Some(word),
        _ => None,
    }
}

fn shown(token: Option<&Token>) -> String {
    token.map_or_else(|| "the end".to_owned(), Token::to_string)
}

/// A label key: an optional DNS-subdomain prefix and `/`, then a name of at
/// most 63 alphanumerics, `-`, `_` and `.`, starting and ending alphanumeric.
fn check_key(key: &str) -> Result<(), String> {
    let (prefix, name) = match key.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    if let Some(prefix) = prefix
        && !super::is_dns_subdomain(prefix)
    {
        return Err(format!(
            "{key:?} is not a label key: its prefix {prefix:?} is not a DNS subdomain"
        ));
    }
    if name.is_empty() || !is_label_text(name) {
        let mut problem = format!("{key:?} is not a label key");
        if key.contains(':') {
            problem.push_str(" (a `key:value` item of Reloader's is written without spaces)");
        }
        return Err(problem);
    }
    Ok(())
}

/// A label value: empty, or at most 63 alphanumerics, `-`, `_` and `.`,
/// starting and ending alphanumeric.
fn check_value(key: &str, value: &str) -> Result<(), String> {
    if value.is_empty() || is_label_text(value) {
        return Ok(());
    }
    Err(format!("{value:?} is not a label value (of {key:?})"))
}

fn is_label_text(text: &str) -> bool {
    let alphanumeric = |c: char| c.is_ascii_alphanumeric();
    text.len() <= 63
        && text.starts_with(alphanumeric)
        && text.ends_with(alphanumeric)
        && text.chars().all(|c| alphanumeric(c) || "-_.".contains(c))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_form_of_requirement_parses() {
        for text in [
            "",
            "team=a",
            "team == a",
            "team!=a",
            "team in (a,b)",
            "team notin (a, b),!legacy",
            "example.com/team in (a)",
            "tier,!legacy",
            "x in (foo,,baz),y,z notin ()",
            "generation>1,age<10",
            "team=",
        ] {
            assert_eq!(label_selector(text), Ok(text.to_owned()), "{text:?}");
        }
    }

    #[test]
    fn an_unclosed_set_is_an_error_saying_what_was_expected() {
        assert_eq!(
            label_selector("team in (a,b"),
            Err("expected ',' or ')' in the values of \"team\", found the end".to_owned())
        );
    }

    #[test]
    fn bad_keys_values_and_operators_are_errors() {
        for text in [
            "team in a",
            "-team=a",
            "team=a b",
            "team=(a)",
            "team>one",
            "team,,other",
            "Team=a_",
            "bad_prefix/x=a",
            "team=a)",
            "!",
            "team app",
        ] {
            assert!(label_selector(text).is_err(), "{text:?} parsed");
        }
    }

    #[test]
    fn reloaders_key_value_items_are_read_as_reloader_reads_them() {
        assert_eq!(label_selector("app:web"), Ok("app=web".to_owned()));
        assert_eq!(
            label_selector("app:web,tier:*,env=*,zone in (a,b)"),
            Ok("app=web,tier,env,zone in (a,b)".to_owned())
        );
    }

    #[test]
    fn a_key_value_item_with_spaces_is_an_error_with_a_hint() {
        let error = label_selector("app: web").unwrap_err();
        assert!(error.contains("Reloader"), "{error}");
    }
}
