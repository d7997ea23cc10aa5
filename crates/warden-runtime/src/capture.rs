//! A program's output streams, bounded without stopping the program.
//!
//! A test runner's verdict is at the end of its output, and the first failure
//! near the start: a stream keeps its first half and its last half of
//! `limits.max_output` ([`HeadTail`]) and counts what it drops from the middle,
//! while the pipe is drained to the end, so the program is never killed for
//! what it prints (only its timeout, CPU time and other limits stop it).
//!
//! [`fit`] then shares `max_output` between the streams of one result, so the
//! shaping stage has nothing left to cut: each text keeps its head and tail
//! around one marker that says how many bytes were dropped there.

use std::collections::VecDeque;

/// What a result keeps of `max_output` for its other fields (exit code, usage,
/// the sandbox and network summaries), so the streams fit beside them.
pub const RESULT_RESERVE: usize = 2048;

/// The bytes of `max_output` the streams of one result share.
pub fn budget(max_output: usize) -> usize {
    max_output.saturating_sub(RESULT_RESERVE).max(max_output / 2)
}

/// One stream's head and tail.
#[derive(Debug, Clone, Default)]
pub struct HeadTail {
    /// How many leading bytes are kept.
    half: usize,
    /// How many trailing bytes are kept.
    rest: usize,
    head: Vec<u8>,
    tail: VecDeque<u8>,
    total: u64,
}

impl HeadTail {
    /// Keeps at most `cap` bytes: the first half and the last half.
    pub fn new(cap: usize) -> HeadTail {
        let half = cap / 2;
        HeadTail { half, rest: cap - half, ..HeadTail::default() }
    }

    /// Takes the next bytes of the stream.
    pub fn push(&mut self, mut data: &[u8]) {
        self.total += data.len() as u64;
        let room = self.half.saturating_sub(self.head.len());
        if room > 0 {
            let take = room.min(data.len());
            self.head.extend_from_slice(&data[..take]);
            data = &data[take..];
        }
        if self.rest == 0 || data.is_empty() {
            return;
        }
        if data.len() >= self.rest {
            self.tail.clear();
            self.tail.extend(&data[data.len() - self.rest..]);
            return;
        }
        let over = (self.tail.len() + data.len()).saturating_sub(self.rest);
        self.tail.drain(..over);
        self.tail.extend(data);
    }

    /// Bytes written in all, kept or not.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Up to `limit` kept bytes from stream offset `offset`, the offset after
    /// them, and how many bytes from `offset` on were dropped before the kept
    /// tail (a background job's output read in chunks).
    pub fn read(&self, offset: u64, limit: usize) -> (Vec<u8>, u64, u64) {
        let head_len = self.head.len() as u64;
        if offset < head_len {
            let from = offset as usize;
            let to = (from + limit).min(self.head.len());
            return (self.head[from..to].to_vec(), to as u64, 0);
        }
        let tail_start = self.total - self.tail.len() as u64;
        let (from, skipped) = if offset < tail_start { (tail_start, tail_start - offset) } else { (offset, 0) };
        if from >= self.total {
            return (Vec::new(), self.total.max(offset), skipped);
        }
        let i = (from - tail_start) as usize;
        let chunk: Vec<u8> = self.tail.iter().skip(i).take(limit).copied().collect();
        let next = from + chunk.len() as u64;
        (chunk, next, skipped)
    }

    /// Bytes kept.
    pub fn kept(&self) -> usize {
        self.head.len() + self.tail.len()
    }

    /// Bytes dropped from the middle.
    pub fn dropped(&self) -> u64 {
        self.total - self.kept() as u64
    }

    /// The kept bytes, joined, with no marker (for a helper's own error text).
    pub fn joined(&self) -> Vec<u8> {
        let mut v = self.head.clone();
        v.extend(&self.tail);
        v
    }

    /// The stream as text within `allowance` bytes (before JSON escaping): the
    /// first and last bytes it kept, and a marker where bytes were dropped.
    fn text(&self, name: &str, allowance: usize) -> (String, u64) {
        let (mut h, mut t) = (self.head.len(), self.tail.len());
        if h + t > allowance {
            h = h.min(allowance / 2);
            t = t.min(allowance - h);
            h = self.head.len().min(allowance - t);
        }
        // Cut on character boundaries: never split a UTF-8 sequence.
        h = complete(&self.head[..h]);
        let mut start = self.tail.len() - t;
        for _ in 0..3 {
            if start < self.tail.len() && is_continuation(self.tail[start]) {
                start += 1;
            }
        }
        let dropped = self.total - (h + self.tail.len() - start) as u64;
        let tail: Vec<u8> = self.tail.range(start..).copied().collect();
        let mut text = String::from_utf8_lossy(&self.head[..h]).into_owned();
        if dropped > 0 {
            text.push_str(&format!(
                "\n…[truncated {dropped} of {} bytes of {name} here (limits.max_output); the last {} follow]…\n",
                self.total,
                tail.len()
            ));
        }
        text.push_str(&String::from_utf8_lossy(&tail));
        (text, dropped)
    }
}

fn is_continuation(b: u8) -> bool {
    b & 0b1100_0000 == 0b1000_0000
}

/// The length of `b` without an incomplete UTF-8 sequence at its end.
fn complete(b: &[u8]) -> usize {
    let n = b.len();
    for back in 1..=n.min(4) {
        let c = b[n - back];
        if !is_continuation(c) {
            let need = match c {
                0xC0..=0xDF => 2,
                0xE0..=0xEF => 3,
                0xF0..=0xF7 => 4,
                _ => 1,
            };
            return if need > back { n - back } else { n };
        }
    }
    n
}

/// One stream made text for a result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fitted {
    /// The head, a marker where bytes were dropped, and the tail.
    pub text: String,
    /// Bytes dropped from the middle.
    pub dropped: u64,
}

/// Makes `streams` text that together take at most `budget` bytes of JSON
/// (plus the markers): a stream that fits keeps everything, and the longer ones
/// share what is left, each keeping its head and its tail. The texts are
/// cleaned as results are ([`crate::shape::sanitize_str`]), and each stream's
/// share is weighed by what one of its bytes costs in JSON: quotes and
/// backslashes double, control characters are removed.
pub fn fit<const N: usize>(streams: [(&str, &HeadTail); N], budget: usize) -> [Fitted; N] {
    let cost: [f64; N] = std::array::from_fn(|i| {
        let kept = streams[i].1.joined();
        if kept.is_empty() {
            return 1.0;
        }
        let text = crate::shape::sanitize_str(&String::from_utf8_lossy(&kept));
        (json_len(&text) as f64 / kept.len() as f64).max(MIN_COST)
    });
    let mut target = budget as f64;
    let mut out = fit_once(&streams, target, &cost);
    for _ in 0..8 {
        let json: usize = out.iter().map(|f| json_len(&f.text)).sum();
        let markers: usize = out.iter().filter(|f| f.dropped > 0).map(|_| MARKER).sum();
        if json <= budget + markers || target < 1.0 {
            break;
        }
        // The head and the tail cost more than the estimate: aim lower and fit again.
        target *= 0.9 * budget as f64 / json.saturating_sub(markers).max(1) as f64;
        out = fit_once(&streams, target, &cost);
    }
    out
}

/// Room for one marker, beyond the budget.
const MARKER: usize = 160;

/// The least a kept byte is taken to cost (a stream of control characters,
/// which cleaning removes, still gets a bounded share).
const MIN_COST: f64 = 0.05;

fn fit_once<const N: usize>(streams: &[(&str, &HeadTail); N], budget: f64, cost: &[f64; N]) -> [Fitted; N] {
    // Shares `budget` (in JSON bytes): the cheapest streams first, each taking at
    // most an even share of what is left.
    let whole = |i: usize| streams[i].1.kept() as f64 * cost[i];
    let mut order: [usize; N] = std::array::from_fn(|i| i);
    order.sort_by(|&a, &b| whole(a).total_cmp(&whole(b)));
    let mut allowance = [0usize; N];
    let mut left = budget.max(0.0);
    for (n, &i) in order.iter().enumerate() {
        let share = (left / (N - n) as f64).min(whole(i));
        allowance[i] = ((share / cost[i] + 1e-6) as usize).min(streams[i].1.kept());
        left -= share;
    }
    std::array::from_fn(|i| {
        let (name, s) = streams[i];
        let (text, dropped) = s.text(name, allowance[i]);
        Fitted { text: crate::shape::sanitize_str(&text), dropped }
    })
}

fn json_len(s: &str) -> usize {
    serde_json::to_string(s).map_or(usize::MAX / 4, |j| j.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stream(cap: usize, chunks: &[&[u8]]) -> HeadTail {
        let mut s = HeadTail::new(cap);
        for c in chunks {
            s.push(c);
        }
        s
    }

    #[test]
    fn short_streams_are_kept_whole() {
        let s = stream(10, &[b"abc", b"defg"]);
        assert_eq!((s.kept(), s.dropped(), s.total()), (7, 0, 7));
        assert_eq!(fit([("stdout", &s)], 100), [Fitted { text: "abcdefg".into(), dropped: 0 }]);
    }

    #[test]
    fn long_streams_keep_their_head_and_tail_and_count_the_middle() {
        let s = stream(8, &[b"0123", b"456789", b"abcdefghij", b"XYZ"]);
        assert_eq!(s.joined(), b"0123jXYZ");
        assert_eq!((s.total(), s.kept(), s.dropped()), (23, 8, 15));
        let f = &fit([("stdout", &s)], 100)[0];
        assert!(f.text.starts_with("0123\n…[truncated 15 of 23 bytes of stdout"), "{}", f.text);
        assert!(f.text.ends_with("the last 4 follow]…\njXYZ"), "{}", f.text);
        assert_eq!(f.dropped, 15);
    }

    #[test]
    fn one_big_push_keeps_its_own_end() {
        let data: Vec<u8> = (0..100u8).collect();
        let s = stream(10, &[&data]);
        assert_eq!(s.joined(), [0, 1, 2, 3, 4, 95, 96, 97, 98, 99]);
    }

    #[test]
    fn streams_share_the_budget_and_a_small_one_stays_whole() {
        let big = stream(1000, &[&[b'o'; 5000]]);
        let small = stream(1000, &[b"error: the last line\n"]);
        let out = fit([("stdout", &big), ("stderr", &small)], 300);
        assert_eq!(out[1].text, "error: the last line\n");
        assert_eq!(out[1].dropped, 0);
        assert!(out[0].dropped > 0);
        let (head, rest) = out[0].text.split_once("\n…[truncated ").unwrap_or_default();
        let (_, tail) = rest.split_once("]…\n").unwrap_or_default();
        let kept = head.len() + tail.len();
        assert_eq!(kept as u64, 5000 - out[0].dropped);
        assert!((250..=300 - 21).contains(&kept), "the rest of the budget: {kept}");
    }

    #[test]
    fn cuts_fall_between_characters() {
        let s = stream(7, &["ééééééééé".as_bytes()]);
        for budget in [5, 7, 9] {
            let f = &fit([("stdout", &s)], budget)[0];
            assert!(!f.text.contains('\u{FFFD}'), "{}", f.text);
            assert!(f.text.starts_with("é\n…[truncated") || f.text.starts_with("\n…[truncated"), "{}", f.text);
            assert!(f.text.ends_with("follow]…\néé") || f.text.ends_with("follow]…\né"), "{}", f.text);
        }
    }

    #[test]
    fn escaping_is_counted_in_the_budget() {
        let s = stream(10_000, &[&[b'"'; 10_000]]);
        let out = fit([("stdout", &s)], 1000);
        assert!(json_len(&out[0].text) <= 1000 + 160, "{}", json_len(&out[0].text));
        assert!(json_len(&out[0].text) > 700, "most of the budget is used: {}", json_len(&out[0].text));
    }

    #[test]
    fn a_stream_of_control_characters_does_not_starve_the_other() {
        // 16 MB of NULs on stderr (removed by cleaning, 6 bytes each in JSON if not)
        // beside text on stdout: stdout keeps its head and its tail, END included.
        let mut out = stream(65536, &[b"FIRST\n"]);
        for _ in 0..16 {
            out.push(&[b'o'; 1 << 20]);
        }
        out.push(b"END\n");
        let mut err = HeadTail::new(65536);
        for _ in 0..16 {
            err.push(&[0u8; 1 << 20]);
        }
        let [o, e] = fit([("stdout", &out), ("stderr", &err)], 63_488);
        assert!(o.text.starts_with("FIRST\no") && o.text.ends_with("oEND\n"), "{}", &o.text[..40]);
        assert!(json_len(&o.text) > 40_000, "stdout got the room: {}", json_len(&o.text));
        assert!(json_len(&o.text) + json_len(&e.text) <= 63_488 + 320);
        assert!(!e.text.contains('\0') && e.dropped > 16_000_000 - 65_536, "{:?}", e.dropped);
    }
}
