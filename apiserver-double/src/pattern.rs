//! A small backtracking matcher for the `pattern` keyword of CRD schemas
//! (Go `regexp`, RE2 syntax, unanchored search).
//!
//! Supported: literals and escapes, `.`, `^`, `$`, `\b`, `\B`, classes
//! (`[a-z]`, `[^...]`, `\d \w \s` and their negations, `[:alpha:]`-style
//! names), groups (capturing, `(?:...)`), alternation, and the quantifiers
//! `* + ? {n} {n,} {n,m}` (greedy or lazy). Anything else (flags, Unicode
//! classes, ...) is [`PatternError::Unsupported`]: the caller must not
//! silently accept values it cannot check.

/// Why a pattern cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum PatternError {
    /// Not a valid regular expression (Go would reject it too).
    #[error("{0}")]
    Invalid(String),
    /// Valid RE2 the double does not implement.
    #[error("the apiserver double does not support {0} in patterns")]
    Unsupported(String),
}

#[derive(Debug, Clone)]
enum Node {
    Char(char),
    Any,
    Class(Vec<(char, char)>, bool),
    Start,
    End,
    WordBoundary(bool),
    Concat(Vec<Node>),
    Alt(Vec<Node>),
    Repeat {
        node: Box<Node>,
        min: u32,
        max: Option<u32>,
        greedy: bool,
    },
}

/// A compiled pattern.
#[derive(Debug, Clone)]
pub(crate) struct Regex {
    root: Node,
}

const DIGIT: &[(char, char)] = &[('0', '9')];
const WORD: &[(char, char)] = &[('0', '9'), ('A', 'Z'), ('_', '_'), ('a', 'z')];
const SPACE: &[(char, char)] = &[('\t', '\n'), ('\u{c}', '\r'), (' ', ' ')];

struct Parser<'a> {
    chars: Vec<char>,
    pos: usize,
    source: &'a str,
}

impl Regex {
    /// Compiles a pattern.
    pub fn new(source: &str) -> Result<Regex, PatternError> {
        let mut p = Parser {
            chars: source.chars().collect(),
            pos: 0,
            source,
        };
        let root = p.alternation()?;
        if p.pos < p.chars.len() {
            return Err(PatternError::Invalid(format!(
                "error parsing regexp: unexpected ): `{source}`"
            )));
        }
        Ok(Regex { root })
    }

    /// Whether the pattern matches anywhere in `text` (Go's `MatchString`).
    pub fn is_match(&self, text: &str) -> bool {
        let chars: Vec<char> = text.chars().collect();
        let mut budget = 1_000_000u32;
        (0..=chars.len())
            .any(|start| matches(&self.root, &chars, start, &mut budget, &mut |_, _| true))
    }
}

impl Parser<'_> {
    fn peek(&self) -> Option<char> {
        self.chars.get(self.pos).copied()
    }

    fn invalid(&self, what: &str) -> PatternError {
        PatternError::Invalid(format!("error parsing regexp: {what}: `{}`", self.source))
    }

    fn alternation(&mut self) -> Result<Node, PatternError> {
        let mut branches = vec![self.concat()?];
        while self.peek() == Some('|') {
            self.pos += 1;
            branches.push(self.concat()?);
        }
        Ok(if branches.len() == 1 {
            branches.pop().unwrap_or(Node::Concat(Vec::new()))
        } else {
            Node::Alt(branches)
        })
    }

    fn concat(&mut self) -> Result<Node, PatternError> {
        let mut items = Vec::new();
        while let Some(c) = self.peek() {
            if c == '|' || c == ')' {
                break;
            }
            let atom = self.atom()?;
            items.push(self.quantified(atom)?);
        }
        Ok(Node::Concat(items))
    }

    fn quantified(&mut self, atom: Node) -> Result<Node, PatternError> {
        let (min, max) = match self.peek() {
            Some('*') => (0, None),
            Some('+') => (1, None),
            Some('?') => (0, Some(1)),
            Some('{') => match self.braces()? {
                Some(b) => b,
                None => return Ok(atom),
            },
            _ => return Ok(atom),
        };
        // The operator (or the closing brace).
        self.pos += 1;
        if matches!(atom, Node::Start | Node::End | Node::WordBoundary(_)) {
            return Err(self.invalid("missing argument to repetition operator"));
        }
        let greedy = if self.peek() == Some('?') {
            self.pos += 1;
            false
        } else {
            true
        };
        if matches!(self.peek(), Some('*' | '+' | '?')) {
            return Err(self.invalid("invalid nested repetition operator"));
        }
        Ok(Node::Repeat {
            node: Box::new(atom),
            min,
            max,
            greedy,
        })
    }

    /// `{n}`, `{n,}`, `{n,m}`; `None` when the brace is a literal. Leaves
    /// the position on the closing brace.
    fn braces(&mut self) -> Result<Option<(u32, Option<u32>)>, PatternError> {
        let rest: String = self.chars[self.pos..].iter().collect();
        let Some(end) = rest.find('}') else {
            return Ok(None);
        };
        let body = &rest[1..end];
        let num = |s: &str| s.parse::<u32>().ok().filter(|n| *n <= 1000);
        let parsed = match body.split_once(',') {
            None => num(body).map(|n| (n, Some(n))),
            Some((a, "")) => num(a).map(|n| (n, None)),
            Some((a, b)) => num(a).zip(num(b)).map(|(a, b)| (a, Some(b))),
        };
        match parsed {
            None => Ok(None),
            Some((a, Some(b))) if b < a => Err(self.invalid("invalid repeat count")),
            Some(p) => {
                self.pos += rest[..end].chars().count();
                Ok(Some(p))
            }
        }
    }

    fn atom(&mut self) -> Result<Node, PatternError> {
        let c = self
            .peek()
            .ok_or_else(|| self.invalid("missing argument"))?;
        self.pos += 1;
        match c {
            '.' => Ok(Node::Any),
            '^' => Ok(Node::Start),
            '$' => Ok(Node::End),
            '(' => self.group(),
            '[' => self.class(),
            '\\' => self.escape(),
            '*' | '+' | '?' => Err(self.invalid("missing argument to repetition operator")),
            other => Ok(Node::Char(other)),
        }
    }

    fn group(&mut self) -> Result<Node, PatternError> {
        if self.peek() == Some('?') {
            if self.chars.get(self.pos + 1) == Some(&':') {
                self.pos += 2;
            } else {
                return Err(PatternError::Unsupported("group flags".into()));
            }
        }
        let inner = self.alternation()?;
        if self.peek() != Some(')') {
            return Err(self.invalid("missing closing )"));
        }
        self.pos += 1;
        Ok(inner)
    }

    fn escape(&mut self) -> Result<Node, PatternError> {
        let c = self
            .peek()
            .ok_or_else(|| self.invalid("trailing backslash at end of expression"))?;
        self.pos += 1;
        Ok(match c {
            'd' => Node::Class(DIGIT.to_vec(), false),
            'D' => Node::Class(DIGIT.to_vec(), true),
            'w' => Node::Class(WORD.to_vec(), false),
            'W' => Node::Class(WORD.to_vec(), true),
            's' => Node::Class(SPACE.to_vec(), false),
            'S' => Node::Class(SPACE.to_vec(), true),
            'b' => Node::WordBoundary(true),
            'B' => Node::WordBoundary(false),
            'A' => Node::Start,
            'z' => Node::End,
            'n' => Node::Char('\n'),
            't' => Node::Char('\t'),
            'r' => Node::Char('\r'),
            'f' => Node::Char('\u{c}'),
            'v' => Node::Char('\u{b}'),
            c if c.is_ascii_punctuation() => Node::Char(c),
            'p' | 'P' | 'x' | 'Q' | 'C' => {
                return Err(PatternError::Unsupported(format!("\\{c}")));
            }
            c if c.is_ascii_digit() => {
                return Err(PatternError::Unsupported("octal escapes".into()));
            }
            c => return Err(self.invalid(&format!("invalid escape sequence: `\\{c}`"))),
        })
    }

    fn class(&mut self) -> Result<Node, PatternError> {
        let negated = if self.peek() == Some('^') {
            self.pos += 1;
            true
        } else {
            false
        };
        let mut ranges = Vec::new();
        let mut first = true;
        loop {
            let c = self
                .peek()
                .ok_or_else(|| self.invalid("missing closing ]"))?;
            if c == ']' && !first {
                self.pos += 1;
                break;
            }
            first = false;
            if c == '[' && self.chars.get(self.pos + 1) == Some(&':') {
                ranges.extend(self.named_class()?);
                continue;
            }
            let lo = self.class_char(&mut ranges)?;
            let Some(lo) = lo else { continue };
            if self.peek() == Some('-') && self.chars.get(self.pos + 1).is_some_and(|c| *c != ']') {
                self.pos += 1;
                let hi = self
                    .class_char(&mut ranges)?
                    .ok_or_else(|| self.invalid("invalid character class range"))?;
                if hi < lo {
                    return Err(self.invalid("invalid character class range"));
                }
                ranges.push((lo, hi));
            } else {
                ranges.push((lo, lo));
            }
        }
        Ok(Node::Class(ranges, negated))
    }

    /// One character of a class; `None` when an escape added a whole class.
    fn class_char(&mut self, ranges: &mut Vec<(char, char)>) -> Result<Option<char>, PatternError> {
        let c = self
            .peek()
            .ok_or_else(|| self.invalid("missing closing ]"))?;
        self.pos += 1;
        if c != '\\' {
            return Ok(Some(c));
        }
        match self.escape()? {
            Node::Char(c) => Ok(Some(c)),
            Node::Class(r, false) => {
                ranges.extend(r);
                Ok(None)
            }
            _ => Err(PatternError::Unsupported(
                "negated or boundary escapes in classes".into(),
            )),
        }
    }

    fn named_class(&mut self) -> Result<Vec<(char, char)>, PatternError> {
        let rest: String = self.chars[self.pos..].iter().collect();
        let end = rest
            .find(":]")
            .ok_or_else(|| self.invalid("missing closing ]"))?;
        let name = &rest[2..end];
        self.pos += rest[..end + 2].chars().count();
        Ok(match name {
            "alpha" => vec![('A', 'Z'), ('a', 'z')],
            "digit" => DIGIT.to_vec(),
            "alnum" => vec![('0', '9'), ('A', 'Z'), ('a', 'z')],
            "lower" => vec![('a', 'z')],
            "upper" => vec![('A', 'Z')],
            "space" => SPACE.to_vec(),
            "word" => WORD.to_vec(),
            "xdigit" => vec![('0', '9'), ('A', 'F'), ('a', 'f')],
            other => {
                return Err(PatternError::Unsupported(format!("[:{other}:]")));
            }
        })
    }
}

fn is_word(c: Option<&char>) -> bool {
    c.is_some_and(|c| c.is_ascii_alphanumeric() || *c == '_')
}

fn in_class(ranges: &[(char, char)], negated: bool, c: char) -> bool {
    ranges.iter().any(|(lo, hi)| *lo <= c && c <= *hi) != negated
}

/// Matches `node` at `pos`, calling `k` with the end position of every way
/// it matches until `k` accepts.
fn matches(
    node: &Node,
    text: &[char],
    pos: usize,
    budget: &mut u32,
    k: &mut dyn FnMut(usize, &mut u32) -> bool,
) -> bool {
    if *budget == 0 {
        return false;
    }
    *budget -= 1;
    match node {
        Node::Char(c) => text.get(pos) == Some(c) && k(pos + 1, budget),
        Node::Any => text.get(pos).is_some_and(|c| *c != '\n') && k(pos + 1, budget),
        Node::Class(r, neg) => {
            text.get(pos).is_some_and(|c| in_class(r, *neg, *c)) && k(pos + 1, budget)
        }
        Node::Start => pos == 0 && k(pos, budget),
        Node::End => pos == text.len() && k(pos, budget),
        Node::WordBoundary(want) => {
            let at =
                is_word(pos.checked_sub(1).and_then(|p| text.get(p))) != is_word(text.get(pos));
            at == *want && k(pos, budget)
        }
        Node::Concat(items) => concat(items, text, pos, budget, k),
        Node::Alt(branches) => branches.iter().any(|b| matches(b, text, pos, budget, k)),
        Node::Repeat {
            node,
            min,
            max,
            greedy,
        } => repeat(node, *min, *max, *greedy, 0, text, pos, budget, k),
    }
}

fn concat(
    items: &[Node],
    text: &[char],
    pos: usize,
    budget: &mut u32,
    k: &mut dyn FnMut(usize, &mut u32) -> bool,
) -> bool {
    match items.split_first() {
        None => k(pos, budget),
        Some((first, rest)) => matches(first, text, pos, budget, &mut |p, b| {
            concat(rest, text, p, b, k)
        }),
    }
}

#[allow(clippy::too_many_arguments)]
fn repeat(
    node: &Node,
    min: u32,
    max: Option<u32>,
    greedy: bool,
    count: u32,
    text: &[char],
    pos: usize,
    budget: &mut u32,
    k: &mut dyn FnMut(usize, &mut u32) -> bool,
) -> bool {
    let can_stop = count >= min;
    let can_go = max.is_none_or(|m| count < m);
    if !greedy && can_stop && k(pos, budget) {
        return true;
    }
    let went = can_go
        && matches(node, text, pos, budget, &mut |p, b| {
            // An iteration that consumed nothing cannot make progress.
            (p != pos || count < min) && repeat(node, min, max, greedy, count + 1, text, p, b, k)
        });
    went || (greedy && can_stop && k(pos, budget))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(p: &str, t: &str) -> bool {
        Regex::new(p).unwrap().is_match(t)
    }

    #[test]
    fn common_crd_patterns() {
        let dns = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$";
        assert!(m(dns, "my-name"));
        assert!(!m(dns, "-bad"));
        assert!(!m(dns, "Upper"));
        let duration = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$";
        assert!(m(duration, "1h30m"));
        assert!(m(duration, "2.5s"));
        assert!(!m(duration, "1d"));
        let quantity = r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$";
        assert!(m(quantity, "100Mi"));
        assert!(m(quantity, "0.5"));
        assert!(!m(quantity, "lots"));
        assert!(m(r"\d{2,3}", "ab123"), "unanchored search");
        assert!(!m(r"^\d{4}$", "123"));
        assert!(m("a|b", "xb"));
        assert!(m(r"^\w+@\w+\.com$", "me@example.com"));
        assert!(m("^[[:alpha:]_]+$", "ab_c"));
        assert!(m("^(?:ab)*?c$", "ababc"));
        assert!(m("^(a*)+b$", "b"));
    }

    #[test]
    fn errors() {
        assert!(matches!(Regex::new("(a"), Err(PatternError::Invalid(_))));
        assert!(matches!(Regex::new("a)"), Err(PatternError::Invalid(_))));
        assert!(matches!(Regex::new("[a"), Err(PatternError::Invalid(_))));
        assert!(matches!(Regex::new("*a"), Err(PatternError::Invalid(_))));
        assert!(matches!(
            Regex::new(r"\p{L}"),
            Err(PatternError::Unsupported(_))
        ));
        assert!(matches!(
            Regex::new("(?i)abc"),
            Err(PatternError::Unsupported(_))
        ));
    }
}
