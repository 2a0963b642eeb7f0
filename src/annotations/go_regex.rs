//! Go's regular expressions, as Reloader compiles its `reload` list entries:
//! `regexp.Compile("^" + entry + "$")`, matched against an object name.
//!
//! Go's `regexp` (RE2 syntax) and the `regex` crate agree on most of what people
//! write, but not on everything, so a Go pattern is translated into an
//! equivalent `regex` pattern rather than handed over as is. What differs, and
//! what the translation does about it:
//!
//! - **Accepted by `regex`, an error in Go** (an entry Reloader cannot use):
//!   the flags `x`, `u` and `R`; a repeated flag in one group is allowed by Go
//!   but not by `regex`; stacked repetitions (`a**`, `a{2}*`); a counted
//!   repetition above 1000, or whose nesting multiplies past 1000
//!   (`(a{40}){30}`); `\<`, `\>`, `\b{start}` and the other escapes Go lacks;
//!   `\p{…}` names outside Go's tables (binary properties such as `Alphabetic`,
//!   lower-case or abbreviated spellings). Each is an error here too.
//! - **Read differently**: inside `[…]`, `regex` reads `[`, `&&`, `--` and `~~`
//!   as nested classes and set operations, Go as plain characters (and `-` as a
//!   range); `{` that does not start a valid Go repetition (`a{`, `a{,3}`,
//!   `a{01}`) is a literal in Go; `\d`, `\w`, `\s` and `\b` are ASCII in Go and
//!   Unicode in `regex`; octal escapes (`\012`) and `\Q…\E` quoting exist only
//!   in Go; Go allows repeated and digit-first group names (`(?P<1>…)`). The
//!   translation spells every class, escape and group explicitly, so each of
//!   these means what Go means.
//! - **Limits**: Go allows nesting 1000 deep; `regex` refuses a pattern more
//!   than about a hundred groups deep (after translation) and compiled programs
//!   over its size limit. Such a pattern is reported invalid.
//! - **Unicode tables**: `\p{Greek}` and `(?i)` case folding use each library's
//!   Unicode tables, which may be of different Unicode versions. Object names
//!   are ASCII, where the tables agree.
//!
//! Go's grammar here follows `regexp/syntax`'s parser in its Perl mode (what
//! `regexp.Compile` uses); the errors carry Go's own messages.

use regex::Regex;

/// Why Go's `regexp` rejects a pattern, in Go's words.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum GoRegexError {
    /// A bad range (`[z-a]`), an unknown `[:name:]` or `\p{name}`.
    #[error("invalid character class range")]
    InvalidCharRange,
    /// An escape Go does not know (`\q`, `\1`, `\C`).
    #[error("invalid escape sequence")]
    InvalidEscape,
    /// `(?P<name>` with a name that is not `[A-Za-z0-9_]+`, or no closing `>`.
    #[error("invalid named capture")]
    InvalidNamedCapture,
    /// A `(?` group Go does not support (look-around, unknown flags).
    #[error("invalid or unsupported Perl syntax")]
    InvalidPerlOp,
    /// Two repetition operators in a row (`a**`).
    #[error("invalid nested repetition operator")]
    InvalidRepeatOp,
    /// A repetition count above 1000, `{2,1}`, or nested counts multiplying past 1000.
    #[error("invalid repeat count")]
    InvalidRepeatSize,
    /// A `[` class without its `]`.
    #[error("missing closing ]")]
    MissingBracket,
    /// A `(` without its `)`.
    #[error("missing closing )")]
    MissingParen,
    /// A repetition operator with nothing before it (`*a`, `a|*`).
    #[error("missing argument to repetition operator")]
    MissingRepeatArgument,
    /// A `\` ending the pattern.
    #[error("trailing backslash at end of expression")]
    TrailingBackslash,
    /// A `)` without its `(`.
    #[error("unexpected )")]
    UnexpectedParen,
    /// Valid Go, but past the `regex` crate's nesting or size limits.
    #[error("expression too large or nested too deeply")]
    TooLarge,
}

impl GoRegexError {
    /// Why a Reloader list entry is refused, for its `InvalidListItem` error.
    pub(crate) fn reloader_reason(self) -> &'static str {
        match self {
            Self::InvalidCharRange => {
                "Go's regexp refuses it (invalid character class range), so Reloader matches no object with it"
            }
            Self::InvalidEscape => {
                "Go's regexp refuses it (invalid escape sequence), so Reloader matches no object with it"
            }
            Self::InvalidNamedCapture => {
                "Go's regexp refuses it (invalid named capture), so Reloader matches no object with it"
            }
            Self::InvalidPerlOp => {
                "Go's regexp refuses it (invalid or unsupported Perl syntax), so Reloader matches no object with it"
            }
            Self::InvalidRepeatOp => {
                "Go's regexp refuses it (invalid nested repetition operator), so Reloader matches no object with it"
            }
            Self::InvalidRepeatSize => {
                "Go's regexp refuses it (invalid repeat count), so Reloader matches no object with it"
            }
            Self::MissingBracket => {
                "Go's regexp refuses it (missing closing ]), so Reloader matches no object with it"
            }
            Self::MissingParen => {
                "Go's regexp refuses it (missing closing )), so Reloader matches no object with it"
            }
            Self::MissingRepeatArgument => {
                "Go's regexp refuses it (missing argument to repetition operator), so Reloader matches no object with it"
            }
            Self::TrailingBackslash => {
                "Go's regexp refuses it (trailing backslash at end of expression), so Reloader matches no object with it"
            }
            Self::UnexpectedParen => {
                "Go's regexp refuses it (unexpected )), so Reloader matches no object with it"
            }
            Self::TooLarge => {
                "Go's regexp refuses it (expression too large or nested too deeply), so Reloader matches no object with it"
            }
        }
    }
}

/// Largest repetition count Go accepts, alone or multiplied through nesting.
const MAX_REPEAT: u32 = 1000;

/// Compiles `pattern` as Go's `regexp.Compile` would, into a `regex::Regex`
/// that matches exactly the strings Go's would.
pub(crate) fn compile(pattern: &str) -> Result<Regex, GoRegexError> {
    let translated = translate(pattern)?;
    Regex::new(&translated).map_err(|_| GoRegexError::TooLarge)
}

/// `pattern`, read as Go reads it, written in the `regex` crate's syntax.
pub(crate) fn translate(pattern: &str) -> Result<String, GoRegexError> {
    let mut translator = Translator {
        rest: pattern,
        frames: vec![Frame::new("", Flags::default())],
        flags: Flags::default(),
        last_was_repeat: false,
    };
    while !translator.rest.is_empty() {
        translator.step()?;
    }
    translator.finish()
}

// === flags ===

/// Go's four Perl flags (`i`, `m`, `s`, `U`), all off at the start.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Flags {
    fold_case: bool,
    multi_line: bool,
    dot_nl: bool,
    ungreedy: bool,
}

impl Flags {
    fn with(mut self, flag: char, on: bool) -> Self {
        match flag {
            'i' => self.fold_case = on,
            'm' => self.multi_line = on,
            's' => self.dot_nl = on,
            _ => self.ungreedy = on,
        }
        self
    }

    fn get(self, flag: char) -> bool {
        match flag {
            'i' => self.fold_case,
            'm' => self.multi_line,
            's' => self.dot_nl,
            _ => self.ungreedy,
        }
    }

    /// The `regex` flag letters that turn `from` into `self`: `i-m`, or empty.
    fn change_from(self, from: Flags) -> String {
        let (mut on, mut off) = (String::new(), String::new());
        for flag in ['i', 'm', 's', 'U'] {
            match (from.get(flag), self.get(flag)) {
                (false, true) => on.push(flag),
                (true, false) => off.push(flag),
                _ => {}
            }
        }
        if off.is_empty() {
            on
        } else {
            format!("{on}-{off}")
        }
    }
}

// === the translation ===

/// One translated element of a concatenation.
struct Piece {
    text: String,
    /// `None` for a flag change, which Go's parser does not count as an
    /// operand; otherwise the repetition budget the element needs (see
    /// [`repeat_need`]).
    need: Option<u32>,
}

/// An open group (or the whole pattern).
struct Frame {
    /// `(?:` or `(?i:`-style opening; empty for the whole pattern.
    open: String,
    /// The flags outside the group, restored at its `)`.
    outer_flags: Flags,
    /// Finished alternatives.
    branches: Vec<String>,
    /// The alternative being read.
    pieces: Vec<Piece>,
    /// Largest need among finished alternatives.
    need: u32,
}

impl Frame {
    fn new(open: &str, outer_flags: Flags) -> Self {
        Self {
            open: open.to_owned(),
            outer_flags,
            branches: Vec::new(),
            pieces: Vec::new(),
            need: 0,
        }
    }

    fn pieces_need(&self) -> u32 {
        self.pieces.iter().filter_map(|p| p.need).max().unwrap_or(0)
    }

    fn end_branch(&mut self) {
        self.need = self.need.max(self.pieces_need());
        let text: String = self.pieces.drain(..).map(|p| p.text).collect();
        self.branches.push(text);
    }
}

struct Translator<'a> {
    rest: &'a str,
    /// Open groups, innermost last; never empty.
    frames: Vec<Frame>,
    flags: Flags,
    /// Whether the previous element was a repetition operator (Go refuses `a**`).
    last_was_repeat: bool,
}

impl Translator<'_> {
    fn frame(&mut self) -> &mut Frame {
        self.frames
            .last_mut()
            .expect("the whole pattern's frame is never closed")
    }

    fn push_atom(&mut self, text: String) {
        self.frame().pieces.push(Piece {
            text,
            need: Some(0),
        });
    }

    fn bump(&mut self, bytes: usize) {
        self.rest = &self.rest[bytes..];
    }

    /// Reads one element: an atom, an operator, a group boundary or a flag change.
    fn step(&mut self) -> Result<(), GoRegexError> {
        let mut repeated = false;
        let first = self.rest.chars().next().unwrap_or_default();
        match first {
            '(' => self.open_group()?,
            '|' => {
                self.bump(1);
                self.alternative();
            }
            ')' => {
                self.bump(1);
                self.close_group()?;
            }
            '^' | '$' | '.' => {
                self.bump(1);
                self.push_atom(first.to_string());
            }
            '[' => {
                let class = self.class()?;
                self.push_atom(class);
            }
            '*' | '+' | '?' => {
                self.bump(1);
                self.repeat(first.to_string(), None)?;
                repeated = true;
            }
            '{' => match parse_counted(self.rest) {
                Some((min, max, len)) => {
                    self.bump(len);
                    let (text, need) = counted_repeat(min, max)?;
                    self.repeat(text, need)?;
                    repeated = true;
                }
                None => {
                    self.bump(1);
                    self.push_atom(literal('{'));
                }
            },
            '\\' => self.escape()?,
            c => {
                self.bump(c.len_utf8());
                self.push_atom(literal(c));
            }
        }
        self.last_was_repeat = repeated;
        Ok(())
    }

    /// `|`: ends the current alternative. Flags set in it stay on, as in Go.
    fn alternative(&mut self) {
        let flags = self.flags;
        let frame = self.frame();
        frame.end_branch();
        let change = flags.change_from(frame.outer_flags);
        if !change.is_empty() {
            frame.pieces.push(Piece {
                text: format!("(?{change})"),
                need: None,
            });
        }
    }

    /// `(`, `(?:`, `(?P<name>`, `(?<name>`, `(?flags)`, `(?flags:`.
    fn open_group(&mut self) -> Result<(), GoRegexError> {
        let rest = self.rest;
        if !rest.starts_with("(?") {
            self.bump(1);
            self.frames.push(Frame::new("(?:", self.flags));
            return Ok(());
        }
        let named = rest.len() > 4 && rest[2..].starts_with("P<");
        if named || (rest.len() > 3 && rest[2..].starts_with('<')) {
            let start = if named { 4 } else { 3 };
            let end = rest.find('>').ok_or(GoRegexError::InvalidNamedCapture)?;
            let name = &rest[start..end];
            let valid =
                !name.is_empty() && name.bytes().all(|b| b == b'_' || b.is_ascii_alphanumeric());
            if !valid {
                return Err(GoRegexError::InvalidNamedCapture);
            }
            self.bump(end + 1);
            self.frames.push(Frame::new("(?:", self.flags));
            return Ok(());
        }
        self.flag_group()
    }

    /// Go's flag loop: letters `imsU`, one `-`, then `:` (a group) or `)`.
    fn flag_group(&mut self) -> Result<(), GoRegexError> {
        let mut flags = self.flags;
        let mut negated = false;
        let mut saw_flag = false;
        for (index, c) in self.rest.char_indices().skip(2) {
            match c {
                'i' | 'm' | 's' | 'U' => {
                    flags = flags.with(c, !negated);
                    saw_flag = true;
                }
                '-' if !negated => {
                    negated = true;
                    saw_flag = false;
                }
                ':' | ')' if !negated || saw_flag => {
                    self.bump(index + 1);
                    let change = flags.change_from(self.flags);
                    if c == ':' {
                        let open = format!("(?{change}:");
                        self.frames.push(Frame::new(&open, self.flags));
                    } else if !change.is_empty() {
                        self.frame().pieces.push(Piece {
                            text: format!("(?{change})"),
                            need: None,
                        });
                    }
                    self.flags = flags;
                    return Ok(());
                }
                _ => break,
            }
        }
        Err(GoRegexError::InvalidPerlOp)
    }

    fn close_group(&mut self) -> Result<(), GoRegexError> {
        if self.frames.len() == 1 {
            return Err(GoRegexError::UnexpectedParen);
        }
        let mut frame = self.frames.pop().expect("checked above");
        frame.end_branch();
        self.flags = frame.outer_flags;
        let text = format!("{}{})", frame.open, frame.branches.join("|"));
        self.frame().pieces.push(Piece {
            text,
            need: Some(frame.need),
        });
        Ok(())
    }

    /// Applies a repetition operator (`*`, `{2,3}`, …, plus a lazy `?`) to the
    /// last operand of the current alternative.
    fn repeat(&mut self, operator: String, count: Option<u32>) -> Result<(), GoRegexError> {
        let lazy = self.rest.starts_with('?');
        if lazy {
            self.bump(1);
        }
        if self.last_was_repeat {
            return Err(GoRegexError::InvalidRepeatOp);
        }
        let frame = self.frame();
        let operand = frame
            .pieces
            .iter_mut()
            .rev()
            .find(|p| p.need.is_some())
            .ok_or(GoRegexError::MissingRepeatArgument)?;
        let inner = operand.need.unwrap_or(0);
        let need = match count {
            Some(m) => repeat_need(m, inner),
            None => inner,
        };
        if count.is_some_and(|m| m >= 2) && need > MAX_REPEAT {
            return Err(GoRegexError::InvalidRepeatSize);
        }
        let lazy = if lazy { "?" } else { "" };
        operand.text = format!("(?:{}){operator}{lazy}", operand.text);
        operand.need = Some(need);
        Ok(())
    }

    fn finish(mut self) -> Result<String, GoRegexError> {
        if self.frames.len() > 1 {
            return Err(GoRegexError::MissingParen);
        }
        let frame = self.frame();
        frame.end_branch();
        Ok(frame.branches.join("|"))
    }

    /// Everything that starts with `\` outside a class.
    fn escape(&mut self) -> Result<(), GoRegexError> {
        let rest = self.rest;
        let assertion = match rest.as_bytes().get(1) {
            Some(b'A') => Some(r"\A"),
            Some(b'z') => Some(r"\z"),
            // Go's word boundaries are ASCII.
            Some(b'b') => Some(r"(?-u:\b)"),
            Some(b'B') => Some(r"(?-u:\B)"),
            Some(b'C') => return Err(GoRegexError::InvalidEscape),
            Some(b'Q') => {
                let quoted = &rest[2..];
                let (text, after) = quoted.split_once(r"\E").unwrap_or((quoted, ""));
                for c in text.chars() {
                    self.push_atom(literal(c));
                }
                self.rest = after;
                return Ok(());
            }
            _ => None,
        };
        if let Some(assertion) = assertion {
            self.bump(2);
            self.push_atom(assertion.to_owned());
            return Ok(());
        }
        let (item, len) = class_escape(rest)?;
        self.bump(len);
        self.push_atom(item.standalone());
        Ok(())
    }

    /// A `[…]` class, read item by item as Go reads it.
    fn class(&mut self) -> Result<String, GoRegexError> {
        let mut t = &self.rest[1..];
        let negated = t.starts_with('^');
        if negated {
            t = &t[1..];
        }
        let mut items = Vec::new();
        let mut first = true;
        loop {
            if t.starts_with(']') && !first {
                break;
            }
            first = false;
            if let Some((item, len)) = posix_class(t)? {
                items.push(item.to_owned());
                t = &t[len..];
                continue;
            }
            if t.starts_with('\\')
                && matches!(
                    t.as_bytes().get(1),
                    Some(b'p' | b'P' | b'd' | b'D' | b's' | b'S' | b'w' | b'W')
                )
            {
                let (item, len) = class_escape(t)?;
                items.push(item.in_class());
                t = &t[len..];
                continue;
            }
            let (lo, len) = class_char(t)?;
            t = &t[len..];
            let mut hi = lo;
            if t.len() >= 2 && t.starts_with('-') && !t[1..].starts_with(']') {
                let (end, len) = class_char(&t[1..])?;
                t = &t[1 + len..];
                if end < lo {
                    return Err(GoRegexError::InvalidCharRange);
                }
                hi = end;
            }
            items.extend(code_point_range(lo, hi));
        }
        self.rest = &t[1..];
        Ok(class_text(negated, &items))
    }
}

/// The need of `{…}` with largest count `m` around an operand needing `inner`:
/// the smallest budget Go's `repeatIsValid` accepts (a count of 0 needs none).
fn repeat_need(m: u32, inner: u32) -> u32 {
    if m == 0 {
        return 0;
    }
    m.saturating_mul(inner.max(1))
}

/// The `regex` text and the count Go checks for `{min}`, `{min,}`, `{min,max}`.
fn counted_repeat(
    min: u32,
    max: Option<Option<u32>>,
) -> Result<(String, Option<u32>), GoRegexError> {
    let too_big = min > MAX_REPEAT || max.flatten().is_some_and(|m| m > MAX_REPEAT || m < min);
    if too_big {
        return Err(GoRegexError::InvalidRepeatSize);
    }
    Ok(match max {
        None => (format!("{{{min}}}"), Some(min)),
        // `{n,}`: Go counts its minimum, and `{0,}` not at all.
        Some(None) => (format!("{{{min},}}"), Some(min).filter(|m| *m > 0)),
        Some(Some(max)) => (format!("{{{min},{max}}}"), Some(max)),
    })
}

/// Go's `parseRepeat`: `{min}`, `{min,}` or `{min,max}` with decimal numbers
/// without leading zeros; `None` when `s` is not of that form (the `{` is then
/// a literal). `max` is `None` for `{min}` and `Some(None)` for `{min,}`.
/// Numbers of nine digits or more come back as `u32::MAX` (too big).
#[allow(clippy::type_complexity)]
fn parse_counted(s: &str) -> Option<(u32, Option<Option<u32>>, usize)> {
    let body = s.strip_prefix('{')?;
    let (min, after_min) = parse_go_int(body)?;
    let (max, after) = if let Some(after_comma) = after_min.strip_prefix(',') {
        if after_comma.starts_with('}') {
            (Some(None), after_comma)
        } else {
            let (max, after_max) = parse_go_int(after_comma)?;
            (Some(Some(max)), after_max)
        }
    } else {
        (None, after_min)
    };
    let after = after.strip_prefix('}')?;
    Some((min, max, s.len() - after.len()))
}

/// Go's `parseInt`: digits, no leading zero; values from 10⁸ on saturate.
fn parse_go_int(s: &str) -> Option<(u32, &str)> {
    let digits = s.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 || (digits >= 2 && s.starts_with('0')) {
        return None;
    }
    let value = s[..digits].parse::<u32>().ok().filter(|v| *v < 100_000_000);
    Some((value.unwrap_or(u32::MAX), &s[digits..]))
}

// === classes and escapes ===

/// What an escape stands for.
enum Escaped {
    /// One code point (possibly a surrogate, which no string contains).
    Char(u32),
    /// A class, as the items that go between `[` and `]`.
    Class { negated: bool, items: String },
}

impl Escaped {
    /// As an element of its own.
    fn standalone(&self) -> String {
        match self {
            Self::Char(c) => class_text(false, &code_point_range(*c, *c)),
            Self::Class { negated, items } => class_text(*negated, std::slice::from_ref(items)),
        }
    }

    /// As an item inside a class.
    fn in_class(&self) -> String {
        match self {
            Self::Char(c) => code_point_range(*c, *c).concat(),
            Self::Class {
                negated: false,
                items,
            } => items.clone(),
            Self::Class {
                negated: true,
                items,
            } => format!("[^{items}]"),
        }
    }
}

/// An escape at the start of `s` (which starts with `\`): a Unicode class
/// (`\pL`, `\p{Greek}`), a Perl class (`\d`, ASCII as in Go) or one character.
/// Returns it and the bytes it spans.
fn class_escape(s: &str) -> Result<(Escaped, usize), GoRegexError> {
    let perl = match s.as_bytes().get(1) {
        Some(b'd') => Some((false, "0-9")),
        Some(b'D') => Some((true, "0-9")),
        Some(b's') => Some((false, r"\t\n\x0C\r ")),
        Some(b'S') => Some((true, r"\t\n\x0C\r ")),
        Some(b'w') => Some((false, "0-9A-Za-z_")),
        Some(b'W') => Some((true, "0-9A-Za-z_")),
        Some(b'p' | b'P') => return unicode_class(s),
        _ => None,
    };
    if let Some((negated, items)) = perl {
        let items = items.to_owned();
        return Ok((Escaped::Class { negated, items }, 2));
    }
    let (c, len) = go_escape(s)?;
    Ok((Escaped::Char(c), len))
}

/// `\pX`, `\p{Name}`, `\p{^Name}` and the `\P` negations, for the names Go's
/// tables hold.
fn unicode_class(s: &str) -> Result<(Escaped, usize), GoRegexError> {
    let mut negated = s.as_bytes()[1] == b'P';
    let after = &s[2..];
    let (mut name, len) = if let Some(braced) = after.strip_prefix('{') {
        let end = braced.find('}').ok_or(GoRegexError::InvalidCharRange)?;
        (&braced[..end], 3 + end + 1)
    } else {
        let c = after.chars().next().ok_or(GoRegexError::InvalidCharRange)?;
        (&after[..c.len_utf8()], 2 + c.len_utf8())
    };
    if let Some(positive) = name.strip_prefix('^') {
        negated = !negated;
        name = positive;
    }
    if !is_go_unicode_table(name) {
        return Err(GoRegexError::InvalidCharRange);
    }
    let items = format!(r"\p{{{name}}}");
    Ok((Escaped::Class { negated, items }, len))
}

/// Whether Go's `regexp` knows `\p{name}`: `Any`, a general category or a
/// script of Go's `unicode` tables (Unicode 15), spelled exactly.
fn is_go_unicode_table(name: &str) -> bool {
    name == "Any"
        || GO_CATEGORIES.split(' ').any(|n| n == name)
        || GO_SCRIPTS.split(' ').any(|n| n == name)
}

const GO_CATEGORIES: &str = "C Cc Cf Co Cs L Ll Lm Lo Lt Lu M Mc Me Mn N Nd Nl No P Pc Pd Pe Pf Pi Po Ps S Sc Sk Sm So Z Zl Zp Zs";

const GO_SCRIPTS: &str = "Adlam Ahom Anatolian_Hieroglyphs Arabic Armenian Avestan Balinese Bamum \
Bassa_Vah Batak Bengali Bhaiksuki Bopomofo Brahmi Braille Buginese Buhid Canadian_Aboriginal Carian \
Caucasian_Albanian Chakma Cham Cherokee Chorasmian Common Coptic Cuneiform Cypriot Cypro_Minoan \
Cyrillic Deseret Devanagari Dives_Akuru Dogra Duployan Egyptian_Hieroglyphs Elbasan Elymaic Ethiopic \
Georgian Glagolitic Gothic Grantha Greek Gujarati Gunjala_Gondi Gurmukhi Han Hangul Hanifi_Rohingya \
Hanunoo Hatran Hebrew Hiragana Imperial_Aramaic Inherited Inscriptional_Pahlavi Inscriptional_Parthian \
Javanese Kaithi Kannada Katakana Kawi Kayah_Li Kharoshthi Khitan_Small_Script Khmer Khojki Khudawadi \
Lao Latin Lepcha Limbu Linear_A Linear_B Lisu Lycian Lydian Mahajani Makasar Malayalam Mandaic \
Manichaean Marchen Masaram_Gondi Medefaidrin Meetei_Mayek Mende_Kikakui Meroitic_Cursive \
Meroitic_Hieroglyphs Miao Modi Mongolian Mro Multani Myanmar Nabataean Nag_Mundari Nandinagari \
New_Tai_Lue Newa Nko Nushu Nyiakeng_Puachue_Hmong Ogham Ol_Chiki Old_Hungarian Old_Italic \
Old_North_Arabian Old_Permic Old_Persian Old_Sogdian Old_South_Arabian Old_Turkic Old_Uyghur Oriya \
Osage Osmanya Pahawh_Hmong Palmyrene Pau_Cin_Hau Phags_Pa Phoenician Psalter_Pahlavi Rejang Runic \
Samaritan Saurashtra Sharada Shavian Siddham SignWriting Sinhala Sogdian Sora_Sompeng Soyombo \
Sundanese Syloti_Nagri Syriac Tagalog Tagbanwa Tai_Le Tai_Tham Tai_Viet Takri Tamil Tangsa Tangut \
Telugu Thaana Thai Tibetan Tifinagh Tirhuta Toto Ugaritic Vai Vithkuqi Wancho Warang_Citi Yezidi Yi \
Zanabazar_Square";

/// A POSIX class (`[:alpha:]`, `[:^digit:]`) at the start of `s`, written the
/// same way in `regex` (both are ASCII). `None` when `s` does not start one
/// (the `[` is then a plain character).
fn posix_class(s: &str) -> Result<Option<(&str, usize)>, GoRegexError> {
    if s.len() <= 2 || !s.starts_with("[:") {
        return Ok(None);
    }
    let Some(end) = s[2..].find(":]") else {
        return Ok(None);
    };
    let class = &s[..end + 4];
    let inner = &class[2..class.len() - 2];
    let name = inner.strip_prefix('^').unwrap_or(inner);
    if !POSIX_CLASSES.split(' ').any(|n| n == name) {
        return Err(GoRegexError::InvalidCharRange);
    }
    Ok(Some((class, class.len())))
}

const POSIX_CLASSES: &str =
    "alnum alpha ascii blank cntrl digit graph lower print punct space upper word xdigit";

/// One character inside a class: an escape or a literal.
fn class_char(s: &str) -> Result<(u32, usize), GoRegexError> {
    match s.chars().next() {
        None => Err(GoRegexError::MissingBracket),
        Some('\\') => go_escape(s),
        Some(c) => Ok((u32::from(c), c.len_utf8())),
    }
}

/// Go's `parseEscape`: `s` starts with `\`; returns the code point and the
/// bytes the escape spans.
fn go_escape(s: &str) -> Result<(u32, usize), GoRegexError> {
    let mut chars = s[1..].chars();
    let c = chars.next().ok_or(GoRegexError::TrailingBackslash)?;
    let octal = |b: Option<&u8>| b.is_some_and(|b| (b'0'..=b'7').contains(b));
    let bytes = s.as_bytes();
    match c {
        // Escaped ASCII punctuation is itself.
        c if c.is_ascii() && !c.is_ascii_alphanumeric() => Ok((u32::from(c), 2)),
        // `\1`–`\7` alone would be a backreference, which Go refuses.
        '1'..='7' if !octal(bytes.get(2)) => Err(GoRegexError::InvalidEscape),
        '0'..='7' => {
            let mut value = u32::from(c) - u32::from('0');
            let mut len = 2;
            while len < 4 && octal(bytes.get(len)) {
                value = value * 8 + u32::from(bytes[len] - b'0');
                len += 1;
            }
            Ok((value, len))
        }
        'x' => hex_escape(s),
        'a' => Ok((0x07, 2)),
        'f' => Ok((0x0C, 2)),
        'n' => Ok((0x0A, 2)),
        'r' => Ok((0x0D, 2)),
        't' => Ok((0x09, 2)),
        'v' => Ok((0x0B, 2)),
        _ => Err(GoRegexError::InvalidEscape),
    }
}

/// `\xHH` or `\x{H…}` (at most U+10FFFF).
fn hex_escape(s: &str) -> Result<(u32, usize), GoRegexError> {
    let after = &s[2..];
    if let Some(braced) = after.strip_prefix('{') {
        let end = braced.find('}').ok_or(GoRegexError::InvalidEscape)?;
        let digits = &braced[..end];
        let all_hex = !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_hexdigit());
        let value = all_hex
            .then(|| u32::from_str_radix(digits, 16).ok())
            .flatten()
            .filter(|v| *v <= 0x10FFFF)
            .ok_or(GoRegexError::InvalidEscape)?;
        return Ok((value, 3 + end + 1));
    }
    let two = after
        .get(..2)
        .filter(|d| d.bytes().all(|b| b.is_ascii_hexdigit()));
    let value = two.and_then(|d| u32::from_str_radix(d, 16).ok());
    value.map(|v| (v, 4)).ok_or(GoRegexError::InvalidEscape)
}

/// The class items for the code points `lo..=hi`, leaving out surrogates
/// (which Go accepts in ranges and `\x{…}` but no string contains).
fn code_point_range(lo: u32, hi: u32) -> Vec<String> {
    const SURROGATES: std::ops::RangeInclusive<u32> = 0xD800..=0xDFFF;
    let below = (lo, hi.min(SURROGATES.start() - 1));
    let above = (lo.max(SURROGATES.end() + 1), hi);
    [below, above]
        .into_iter()
        .filter(|(lo, hi)| lo <= hi)
        .map(|(lo, hi)| {
            if lo == hi {
                format!(r"\x{{{lo:X}}}")
            } else {
                format!(r"\x{{{lo:X}}}-\x{{{hi:X}}}")
            }
        })
        .collect()
}

/// `[items]` or `[^items]`; a class with no items matches nothing (or, negated,
/// any character).
fn class_text(negated: bool, items: &[String]) -> String {
    let items = items.concat();
    match (negated, items.is_empty()) {
        (false, true) => r"[^\x{0}-\x{10FFFF}]".to_owned(),
        (true, true) => r"[\x{0}-\x{10FFFF}]".to_owned(),
        (false, false) => format!("[{items}]"),
        (true, false) => format!("[^{items}]"),
    }
}

/// One literal character, escaped for `regex`.
fn literal(c: char) -> String {
    regex::escape(c.encode_utf8(&mut [0; 4]))
}

#[cfg(test)]
mod tests;
