//! Placeholders, and the scanner that keeps a credential's real value out of
//! what a tool receives: the placeholder a tool holds instead of the value
//! ([`placeholder`]), the encoded forms of the value paired with the same
//! forms of the placeholder ([`redaction_pairs`]), one matcher that replaces
//! them in a buffer or across a stream's chunks ([`Replacer`], [`Stream`]),
//! and the decoder that undoes a response's gzip or deflate first
//! ([`Decoder`]).
//!
//! Trusts nothing it scans: every input is bounded by its caller (a chunk)
//! or here (a decoder's `limit`). Owns no secret beyond the pairs it is given.

use std::io::Write as _;

use aho_corasick::{AhoCorasick, MatchKind};
use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE};

/// The longest prefix a placeholder keeps from the real value.
pub const MAX_PREFIX: usize = 16;
/// The fewest random characters a placeholder has.
pub const MIN_RANDOM: usize = 16;
/// The shortest real-side form [`redaction_pairs`] keeps: shorter ones are
/// too likely to occur by chance to replace blindly.
pub const MIN_FORM: usize = 8;
/// The placeholder's random alphabet.
const ALPHABET: &[u8; 62] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";

/// A placeholder for `real`: its leading prefix kept (the longest leading run
/// of groups `[A-Za-z]+[_-]`, at most [`MAX_PREFIX`] characters and at most
/// half the length; e.g. "ghp_", "github_pat_", "sk-proj-", "npm_",
/// "glpat-"), then random `[A-Za-z0-9]` from the system's CSPRNG to the same
/// total length (in bytes), but at least [`MIN_RANDOM`] random characters.
/// Never equal to, containing, or contained in `real`: it is drawn again if
/// so. Fails only if the system's random source does.
pub fn placeholder(real: &str) -> Result<String, String> {
    let prefix = &real[..prefix_len(real)];
    let random = real.len().saturating_sub(prefix.len()).max(MIN_RANDOM);
    loop {
        let mut out = String::with_capacity(prefix.len() + random);
        out.push_str(prefix);
        out.push_str(&random_alnum(random)?);
        // The last character's two low bits are never both set: then the
        // base64 character that mixes them with the next byte's bits is never
        // `+`, `/`, `-` or `_`, so one replacement fits standard and URL-safe
        // base64 alike (the other characters of an alphanumeric value's
        // encoding never are either).
        if out.as_bytes().last().is_some_and(|b| b & 3 == 3) {
            continue;
        }
        if real.is_empty() || (!out.contains(real) && !real.contains(out.as_str())) {
            return Ok(out);
        }
    }
}

/// The length of `real`'s kept prefix, in bytes (ASCII only).
fn prefix_len(real: &str) -> usize {
    let bytes = real.as_bytes();
    let (mut kept, mut at) = (0, 0);
    loop {
        let letters = bytes[at..].iter().take_while(|b| b.is_ascii_alphabetic()).count();
        let end = at + letters + 1;
        let separated = letters > 0 && matches!(bytes.get(at + letters), Some(b'_' | b'-'));
        if !separated || end > MAX_PREFIX || end * 2 > bytes.len() {
            return kept;
        }
        (kept, at) = (end, end);
    }
}

/// `n` characters of [`ALPHABET`], uniformly drawn (rejection sampling).
fn random_alnum(n: usize) -> Result<String, String> {
    let mut out = String::with_capacity(n);
    let mut pool = [0u8; 64];
    while out.len() < n {
        getrandom::fill(&mut pool).map_err(|e| format!("cannot draw a credential placeholder: {e}"))?;
        for b in pool {
            // 248 = 4 * 62: values at or above it would bias the draw.
            if b < 248 && out.len() < n {
                out.push(char::from(ALPHABET[usize::from(b % 62)]));
            }
        }
    }
    Ok(out)
}

/// The pairs (real form -> placeholder form) redaction replaces:
/// - raw;
/// - percent-encoded (RFC 3986 unreserved kept), with upper- and lower-case
///   hex, each only if different from raw;
/// - JSON-escaped, only if different from raw: with `/` as `\/` and controls
///   as `\u` and four hex digits; as serde_json and JavaScript write it (`/` kept, `\n` and
///   the like short); and as Python's `ensure_ascii` writes it (non-ASCII as
///   `\u` escapes, surrogate pairs beyond the BMP);
/// - base64 standard and base64url of the value at the 3 byte alignments
///   inside a longer base64 text: for alignment k, (k filler bytes ++ value)
///   encoded, keeping only the characters that depend on the value alone;
///   the placeholder's at the same alignment (so each pair has equal length
///   when the placeholder does);
/// - given `basic_user`, the exact `base64(user:real)` -> `base64(user:placeholder)`.
///
/// Pairs whose real side is shorter than [`MIN_FORM`] bytes are dropped, and
/// each real side appears once (its first pair kept).
pub fn redaction_pairs(real: &str, placeholder: &str, basic_user: Option<&str>) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut pairs: Vec<(Vec<u8>, Vec<u8>)> = vec![(real.into(), placeholder.into())];
    let mut textual = |f: &dyn Fn(&str) -> String| {
        let form = f(real);
        if form != real {
            pairs.push((form.into_bytes(), f(placeholder).into_bytes()));
        }
    };
    textual(&|s| percent(s, true));
    textual(&|s| percent(s, false));
    textual(&|s| json(s, JsonStyle::Strict));
    textual(&|s| json(s, JsonStyle::Short));
    textual(&|s| json(s, JsonStyle::Ascii));
    for engine in [&STANDARD, &URL_SAFE] {
        for k in 0..3 {
            pairs.push((base64_core(engine, k, real.as_bytes()), base64_core(engine, k, placeholder.as_bytes())));
            pairs.extend(base64_edges(engine, k, real.as_bytes(), placeholder.as_bytes()));
        }
    }
    if let Some(user) = basic_user {
        pairs.push((
            STANDARD.encode(format!("{user}:{real}")).into_bytes(),
            STANDARD.encode(format!("{user}:{placeholder}")).into_bytes(),
        ));
    }
    let mut seen = std::collections::HashSet::new();
    pairs.retain(|(from, to)| from.len() >= MIN_FORM && from != to && seen.insert(from.clone()));
    pairs
}

/// `s` percent-encoded: every byte but RFC 3986's unreserved as `%XX`.
pub(crate) fn percent(s: &str, upper: bool) -> String {
    let mut out = String::with_capacity(s.len() * 3);
    for &b in s.as_bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else if upper {
            out.push_str(&format!("%{b:02X}"));
        } else {
            out.push_str(&format!("%{b:02x}"));
        }
    }
    out
}

/// The ways a JSON writer escapes a string.
#[derive(Clone, Copy, PartialEq)]
enum JsonStyle {
    /// `"` `\` escaped, `/` as `\/`, every control as `\u00XX`.
    Strict,
    /// `"` `\` escaped, `\b\f\n\r\t` short, other controls `\u00xx`, `/` kept
    /// (serde_json, JavaScript).
    Short,
    /// As [`JsonStyle::Short`], and every non-ASCII character as `\uxxxx`
    /// (Python's `json.dumps`).
    Ascii,
}

/// `s` as the inside of a JSON string written in `style`.
fn json(s: &str, style: JsonStyle) -> String {
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '/' if style == JsonStyle::Strict => out.push_str("\\/"),
            '\u{8}' if style != JsonStyle::Strict => out.push_str("\\b"),
            '\u{c}' if style != JsonStyle::Strict => out.push_str("\\f"),
            '\n' if style != JsonStyle::Strict => out.push_str("\\n"),
            '\r' if style != JsonStyle::Strict => out.push_str("\\r"),
            '\t' if style != JsonStyle::Strict => out.push_str("\\t"),
            c if c < ' ' && style == JsonStyle::Strict => out.push_str(&format!("\\u{:04X}", u32::from(c))),
            c if c < ' ' => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c if !c.is_ascii() && style == JsonStyle::Ascii => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    out.push_str(&format!("\\u{unit:04x}"));
                }
            }
            c => out.push(c),
        }
    }
    out
}

/// The base64 characters of `value` placed at byte alignment `k` (0..3) of
/// a longer text that depend on `value`'s bits alone: character i covers
/// bits 6i..6i+6 of (k filler bytes ++ value), so those from ceil(8k/6) to
/// floor(8(k+n)/6).
fn base64_core(engine: &base64::engine::GeneralPurpose, k: usize, value: &[u8]) -> Vec<u8> {
    let mut text = vec![0u8; k];
    text.extend_from_slice(value);
    let encoded = engine.encode(&text).into_bytes();
    let first = (8 * k).div_ceil(6);
    let end = 8 * (k + value.len()) / 6;
    encoded.get(first..end).map(<[u8]>::to_vec).unwrap_or_default()
}

/// The base64 forms at alignment `k` *with* the characters at each end that
/// mix the value's bits with its neighbours' (the byte before, the byte after
/// or the padding): one pair per possible neighbour bits (4 or 16 each end),
/// the placeholder's form taking the same neighbour bits. Without them the
/// edge characters, passed through, would carry 2 to 4 bits of the value's
/// first and last bytes.
fn base64_edges(engine: &base64::engine::GeneralPurpose, k: usize, real: &[u8], ph: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
    let total = k + real.len();
    let start = (8 * k) / 6;
    let tail = !(8 * total).is_multiple_of(6);
    let end = (8 * total) / 6 + usize::from(tail);
    let leads: Vec<Option<u8>> = if k > 0 { (0..=255u8).map(Some).collect() } else { vec![None] };
    let trails: Vec<Option<u8>> = if tail { (0..=255u8).map(Some).collect() } else { vec![None] };
    let form = |value: &[u8], lead: Option<u8>, trail: Option<u8>| {
        let mut text = vec![0u8; k.saturating_sub(1)];
        text.extend(lead);
        text.extend_from_slice(value);
        text.extend(trail);
        engine.encode(&text).into_bytes().get(start..end).map(<[u8]>::to_vec).unwrap_or_default()
    };
    let mut out: std::collections::BTreeMap<Vec<u8>, Vec<u8>> = std::collections::BTreeMap::new();
    for &lead in &leads {
        for &trail in &trails {
            out.entry(form(real, lead, trail)).or_insert_with(|| form(ph, lead, trail));
        }
    }
    out.into_iter().collect()
}

/// One matcher over a set of (from -> to) pairs: leftmost-longest, so where
/// two forms overlap the longer wins.
#[derive(Debug, Clone)]
pub struct Replacer {
    /// The matcher over the `from` sides; `None` for no pairs.
    matcher: Option<AhoCorasick>,
    /// The `to` sides, by pattern index.
    to: Vec<Vec<u8>>,
    /// The longest `from` side (0 for no pairs).
    max_len: usize,
    /// Whether every pair keeps the length.
    same_length: bool,
}

impl Replacer {
    /// The replacer of `pairs` (empty `from` sides are ignored); no pairs
    /// make a replacer that changes nothing. Fails if the matcher cannot be
    /// built (patterns past aho-corasick's size limits).
    pub fn new(pairs: Vec<(Vec<u8>, Vec<u8>)>) -> Result<Replacer, String> {
        let pairs: Vec<_> = pairs.into_iter().filter(|(from, _)| !from.is_empty()).collect();
        let max_len = pairs.iter().map(|(from, _)| from.len()).max().unwrap_or(0);
        let same_length = pairs.iter().all(|(from, to)| from.len() == to.len());
        let matcher = if pairs.is_empty() {
            None
        } else {
            // Case-insensitive: a server that upper- or lower-cases what it
            // echoes must not get the value past (base64 forms are long
            // enough that a case variant of one is no other text).
            let built = AhoCorasick::builder()
                .match_kind(MatchKind::LeftmostLongest)
                .ascii_case_insensitive(true)
                .build(pairs.iter().map(|(from, _)| from))
                .map_err(|e| format!("cannot build the credential redaction matcher: {e}"))?;
            Some(built)
        };
        Ok(Replacer { matcher, to: pairs.into_iter().map(|(_, to)| to).collect(), max_len, same_length })
    }

    /// Whether this replacer has no pairs (it changes nothing).
    pub fn is_empty(&self) -> bool {
        self.matcher.is_none()
    }

    /// Whether every pair keeps the length (framing may stay Content-Length).
    pub fn same_length(&self) -> bool {
        self.same_length
    }

    /// Replace everywhere in one buffer; returns the new bytes and the number
    /// of replacements.
    pub fn replace_all(&self, input: &[u8]) -> (Vec<u8>, usize) {
        let Some(matcher) = &self.matcher else { return (input.to_vec(), 0) };
        let mut out = Vec::with_capacity(input.len());
        let (mut at, mut hits) = (0, 0);
        for m in matcher.find_iter(input) {
            out.extend_from_slice(&input[at..m.start()]);
            out.extend_from_slice(&self.to[m.pattern().as_usize()]);
            (at, hits) = (m.end(), hits + 1);
        }
        out.extend_from_slice(&input[at..]);
        (out, hits)
    }

    /// A streaming replace over this replacer's pairs.
    pub fn stream(&self) -> Stream<'_> {
        Stream { replacer: self, carry: Vec::new(), hits: 0 }
    }
}

/// Streaming replace across chunk boundaries: keeps back at most the longest
/// form less one byte; memory is one chunk plus that.
#[derive(Debug)]
pub struct Stream<'a> {
    /// The pairs.
    replacer: &'a Replacer,
    /// Bytes fed but not yet emitted: a form may start there.
    carry: Vec<u8>,
    /// Replacements made so far.
    hits: usize,
}

impl Stream<'_> {
    /// Feeds `chunk`; returns the bytes safe to emit now, replaced. A match
    /// starting before `len - (max_len - 1)` of (carry ++ chunk) ends inside
    /// it, so the leftmost-longest choice there is final; the rest is kept.
    pub fn feed(&mut self, chunk: &[u8]) -> Vec<u8> {
        let Some(matcher) = &self.replacer.matcher else { return chunk.to_vec() };
        let mut work = std::mem::take(&mut self.carry);
        work.extend_from_slice(chunk);
        let safe = work.len().saturating_sub(self.replacer.max_len - 1);
        let mut out = Vec::with_capacity(work.len());
        let mut at = 0;
        for m in matcher.find_iter(&work) {
            if m.start() >= safe {
                break;
            }
            out.extend_from_slice(&work[at..m.start()]);
            out.extend_from_slice(&self.replacer.to[m.pattern().as_usize()]);
            at = m.end();
            self.hits += 1;
        }
        let emit = safe.max(at);
        out.extend_from_slice(&work[at..emit]);
        self.carry = work.split_off(emit);
        out
    }

    /// Ends the stream: returns the kept bytes, replaced.
    pub fn finish(&mut self) -> Vec<u8> {
        let carry = std::mem::take(&mut self.carry);
        let (out, hits) = self.replacer.replace_all(&carry);
        self.hits += hits;
        out
    }

    /// Replacements made so far.
    pub fn hits(&self) -> usize {
        self.hits
    }
}

/// The output buffer of one inflate step.
const STEP: usize = 32 * 1024;

/// A streaming decoder for a response's `Content-Encoding`: `gzip`/`x-gzip`
/// (every member) and `deflate` (zlib-wrapped, or raw deflate when the first
/// two bytes are no zlib header) are decoded; `identity` (or none) passes
/// unchanged and unbounded; anything else is refused. A decoded stream is
/// bounded to `limit` bytes in total (a decompression bomb fails), and must
/// end properly: a truncated stream, a bad checksum or trailing bytes fail.
#[derive(Debug)]
pub struct Decoder {
    /// The encoding's state.
    inner: Inner,
    /// Decoded bytes so far.
    total: u64,
    /// The most decoded bytes allowed.
    limit: u64,
    /// Whether any byte was fed (an empty body needs no valid stream).
    fed: bool,
}

/// A [`Decoder`]'s encoding state.
#[derive(Debug)]
enum Inner {
    /// No encoding.
    Identity,
    /// gzip: flate2 checks headers and CRCs; the sink bounds the output.
    Gzip(Box<flate2::write::MultiGzDecoder<Sink>>),
    /// deflate, before two bytes tell zlib from raw.
    DeflateStart(Vec<u8>),
    /// deflate, zlib or raw; `done` once the stream ended.
    Deflate { state: Box<flate2::Decompress>, done: bool },
}

/// Where the gzip decoder writes: refuses to grow past `room` bytes.
#[derive(Debug)]
struct Sink {
    /// Decoded bytes not yet returned.
    out: Vec<u8>,
    /// Bytes it may still take.
    room: u64,
    /// Set when a write would have passed `room`.
    over: bool,
}

impl std::io::Write for Sink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = buf.len() as u64;
        if n > self.room {
            self.over = true;
            return Err(std::io::Error::other("the decoded response passed its limit"));
        }
        self.room -= n;
        self.out.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Decoder {
    /// The decoder of `encoding` (the `Content-Encoding` value, case- and
    /// space-insensitive; empty is identity), bounded to `limit` decoded bytes.
    pub fn new(encoding: &str, limit: u64) -> Result<Decoder, String> {
        let inner = match encoding.trim().to_ascii_lowercase().as_str() {
            "" | "identity" => Inner::Identity,
            "gzip" | "x-gzip" => {
                let sink = Sink { out: Vec::new(), room: limit, over: false };
                Inner::Gzip(Box::new(flate2::write::MultiGzDecoder::new(sink)))
            }
            "deflate" => Inner::DeflateStart(Vec::new()),
            // The server's text is never repeated: it may carry what it echoes.
            _ => {
                return Err("a response in a Content-Encoding other than gzip, deflate or identity, which warden \
                             cannot scan"
                    .into());
            }
        };
        Ok(Decoder { inner, total: 0, limit, fed: false })
    }

    /// Feeds encoded bytes; returns the bytes decoded so far.
    pub fn feed(&mut self, chunk: &[u8]) -> Result<Vec<u8>, String> {
        self.fed |= !chunk.is_empty();
        match &mut self.inner {
            Inner::Identity => Ok(chunk.to_vec()),
            Inner::Gzip(gz) => {
                let written = gz.write_all(chunk);
                self.gzip_out(written)
            }
            Inner::DeflateStart(head) => {
                head.extend_from_slice(chunk);
                if head.len() < 2 {
                    return Ok(Vec::new());
                }
                let head = std::mem::take(head);
                let zlib =
                    (head[0] & 0x0f) == 8 && (head[0] >> 4) <= 7 && u16::from_be_bytes([head[0], head[1]]) % 31 == 0;
                self.inner = Inner::Deflate { state: Box::new(flate2::Decompress::new(zlib)), done: false };
                self.inflate(&head, false)
            }
            Inner::Deflate { .. } => self.inflate(chunk, false),
        }
    }

    /// Ends the stream: returns the last decoded bytes, or an error if the
    /// stream is incomplete or corrupt.
    pub fn finish(&mut self) -> Result<Vec<u8>, String> {
        if !self.fed {
            return Ok(Vec::new());
        }
        match &mut self.inner {
            Inner::Identity => Ok(Vec::new()),
            Inner::Gzip(gz) => {
                let finished = gz.try_finish();
                self.gzip_out(finished)
            }
            Inner::DeflateStart(_) => Err("a deflate response ended inside its first two bytes".into()),
            Inner::Deflate { .. } => self.inflate(&[], true),
        }
    }

    /// The gzip sink's new bytes, or the error of the write that failed.
    fn gzip_out(&mut self, result: std::io::Result<()>) -> Result<Vec<u8>, String> {
        let Inner::Gzip(gz) = &mut self.inner else { return Ok(Vec::new()) };
        let sink = gz.get_mut();
        if sink.over {
            return Err(self.bomb());
        }
        result.map_err(|e| format!("a gzip response does not decode: {e}"))?;
        Ok(std::mem::take(&mut sink.out))
    }

    /// Inflates `input` (zlib or raw) in bounded steps; at `end`, requires
    /// the stream to have ended.
    fn inflate(&mut self, input: &[u8], end: bool) -> Result<Vec<u8>, String> {
        let (limit, mut total) = (self.limit, self.total);
        let Inner::Deflate { state, done } = &mut self.inner else { return Ok(Vec::new()) };
        let mut out = Vec::new();
        let mut at = 0;
        let mut step = vec![0u8; STEP];
        while !*done {
            let (before_in, before_out) = (state.total_in(), state.total_out());
            let flush = if end { flate2::FlushDecompress::Finish } else { flate2::FlushDecompress::None };
            let status = state
                .decompress(&input[at..], &mut step, flush)
                .map_err(|e| format!("a deflate response does not decode: {e}"))?;
            let used = usize::try_from(state.total_in() - before_in).unwrap_or(usize::MAX);
            let made = usize::try_from(state.total_out() - before_out).unwrap_or(usize::MAX);
            at = at.saturating_add(used).min(input.len());
            total += made as u64;
            if total > limit {
                self.total = total;
                return Err(self.bomb());
            }
            out.extend_from_slice(&step[..made]);
            *done = status == flate2::Status::StreamEnd;
            if (used == 0 && made == 0) || (at == input.len() && made < STEP) {
                break;
            }
        }
        self.total = total;
        if *done && at < input.len() {
            return Err("a deflate response has bytes after its end".into());
        }
        if end && !*done {
            return Err("a deflate response ended before its stream did (truncated)".into());
        }
        Ok(out)
    }

    /// The error of a response decoded past its limit.
    fn bomb(&self) -> String {
        format!(
            "a compressed response decodes to more than {} bytes, the most warden scans (a decompression bomb?)",
            self.limit
        )
    }
}

#[cfg(test)]
mod tests;
