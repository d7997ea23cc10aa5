//! Placeholders' shapes, every redaction form found inside independently
//! encoded text, streaming equal to one-shot at every split, and the decoder
//! against flate2's own encoders.

use std::collections::HashSet;
use std::io::Write as _;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use flate2::Compression;

use super::*;

fn random_bytes(n: usize) -> Vec<u8> {
    let mut out = vec![0u8; n];
    getrandom::fill(&mut out).unwrap_or_else(|e| panic!("{e}"));
    out
}

fn ph(real: &str) -> String {
    placeholder(real).unwrap_or_else(|e| panic!("{e}"))
}

fn replacer(real: &str, placeholder: &str, user: Option<&str>) -> Replacer {
    Replacer::new(redaction_pairs(real, placeholder, user)).unwrap_or_else(|e| panic!("{e}"))
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// A GitHub-like token: prefix then 36 random alphanumerics.
fn token(prefix: &str) -> String {
    format!("{prefix}{}", random_alnum(36).unwrap_or_else(|e| panic!("{e}")))
}

/// A value with every character class the forms escape.
const NASTY: &str = "s3cr\u{e9}t/pa ss\"wo\\rd\n+=?&\u{1}\u{1F600}~end";

#[test]
fn placeholders_keep_known_prefixes_and_the_length() {
    for (real, prefix) in [
        (token("ghp_"), "ghp_"),
        (format!("github_pat_11ABCDEFG0_{}", random_alnum(59).unwrap_or_default()), "github_pat_"),
        (format!("sk-proj-{}", random_alnum(48).unwrap_or_default()), "sk-proj-"),
        (token("npm_"), "npm_"),
        (format!("glpat-{}", random_alnum(20).unwrap_or_default()), "glpat-"),
        (token("xoxb-123-"), "xoxb-"),
        (token(""), ""),
        ("abcdefghijklmnop_qrstuvwxyz0123456789abcdefghijkl".to_string(), ""),
        ("abcdefghij_klmno_pqrstuvwxyz0123456789abcdefghijkl".to_string(), "abcdefghij_"),
    ] {
        let p = ph(&real);
        assert!(p.starts_with(prefix), "{real} -> {p}: prefix {prefix:?} not kept");
        assert_eq!(p.len(), real.len(), "{real} -> {p}");
        let rest = &p[prefix.len()..];
        assert!(rest.len() >= MIN_RANDOM && rest.bytes().all(|b| b.is_ascii_alphanumeric()), "{p}");
        assert_eq!(prefix_len(&real), prefix.len(), "{real}");
        assert!(!p.contains(&real) && !real.contains(&p));
    }
}

#[test]
fn short_or_odd_values_get_at_least_16_random_characters() {
    for real in ["hunter2", "npm_abc", "a", "ab-cd", "x_", NASTY, "pw-pw-pw-pw-pw-pw-"] {
        let p = ph(real);
        let random = &p[prefix_len(real)..];
        assert!(random.len() >= MIN_RANDOM, "{real:?} -> {p}");
        assert!(p.len() >= real.len(), "{real:?} -> {p}");
        assert!(random.bytes().all(|b| b.is_ascii_alphanumeric()), "{p}");
        assert!(!p.contains(real) && !real.contains(p.as_str()));
    }
    assert_eq!(ph("npm_abc").len(), MIN_RANDOM, "a prefix over half the length is not kept");
    assert_eq!(ph("").len(), MIN_RANDOM);
}

#[test]
fn a_thousand_draws_are_distinct_and_use_the_whole_alphabet() {
    let real = token("ghp_");
    let draws: HashSet<String> = (0..1000).map(|_| ph(&real)).collect();
    assert_eq!(draws.len(), 1000);
    let used: HashSet<u8> = draws.iter().flat_map(|p| p.as_bytes()[4..].to_vec()).collect();
    assert_eq!(used.len(), 62, "the random part uses {} of 62 characters", used.len());
}

#[test]
fn pairs_are_long_enough_distinct_and_skip_forms_equal_to_raw() {
    let real = token("ghp_");
    let p = ph(&real);
    let pairs = redaction_pairs(&real, &p, None);
    assert_eq!(pairs[0], (real.clone().into_bytes(), p.clone().into_bytes()));
    // raw + 3 to 6 base64 cores (std and url agree without `+` or `/`), and
    // their variants with the edge characters (at most 16 x 16 per alignment):
    // percent and JSON of an alphanumeric token are raw.
    assert!((4..=7 + 6 * 256).contains(&pairs.len()), "{}", pairs.len());
    for k in 0..3 {
        assert!(pairs.contains(&(base64_core(&STANDARD, k, real.as_bytes()), base64_core(&STANDARD, k, p.as_bytes()))));
    }
    assert!(pairs.iter().all(|(from, to)| from.len() >= MIN_FORM && from.len() == to.len()));
    assert!(replacer(&real, &p, None).same_length());
    let froms: HashSet<&Vec<u8>> = pairs.iter().map(|(f, _)| f).collect();
    assert_eq!(froms.len(), pairs.len());
    let nasty = redaction_pairs(NASTY, &ph(NASTY), Some("user"));
    assert!(nasty.len() > 10, "{}", nasty.len());
    assert!(!replacer(NASTY, &ph(NASTY), None).same_length());
    assert!(redaction_pairs("abcd", "placeholderplaceholder", None).is_empty(), "forms under 8 bytes are kept");
}

fn assert_clean(out: &[u8], pairs: &[(Vec<u8>, Vec<u8>)], what: &str) {
    for (from, _) in pairs {
        assert!(!contains(out, from), "{what}: a form of the real value survived: {}", String::from_utf8_lossy(from));
    }
}

/// One way to encode a value into text.
type Encode = Box<dyn Fn(&str) -> String>;

#[test]
fn raw_percent_and_json_forms_are_replaced_by_the_same_form_of_the_placeholder() {
    for real in [token("ghp_"), NASTY.to_string(), format!("sk-proj-{}/+=", random_alnum(40).unwrap_or_default())] {
        let p = ph(&real);
        let pairs = redaction_pairs(&real, &p, None);
        let r = replacer(&real, &p, None);
        let encodings: Vec<(&str, Encode)> = vec![
            ("raw", Box::new(|s: &str| s.to_string())),
            ("percent", Box::new(|s: &str| percent(s, true))),
            ("percent lower", Box::new(|s: &str| percent(s, false))),
            ("serde_json", Box::new(|s: &str| serde_json::to_string(s).unwrap_or_default())),
            ("json strict", Box::new(|s: &str| format!("\"{}\"", json(s, JsonStyle::Strict)))),
            ("json ascii", Box::new(|s: &str| format!("\"{}\"", json(s, JsonStyle::Ascii)))),
        ];
        for (what, encode) in encodings {
            let text = format!("GET /x?a=1&token={}&b=2 {{\"k\": {}}}", encode(&real), encode(&real));
            let (out, hits) = r.replace_all(text.as_bytes());
            assert_eq!(hits, 2, "{what} of {real:?}: {text}");
            assert_clean(&out, &pairs, what);
            let want = format!("GET /x?a=1&token={}&b=2 {{\"k\": {}}}", encode(&p), encode(&p));
            assert_eq!(String::from_utf8_lossy(&out), want, "{what}");
        }
        for style in [JsonStyle::Strict, JsonStyle::Short, JsonStyle::Ascii] {
            let back: String = serde_json::from_str(&format!("\"{}\"", json(&real, style)))
                .unwrap_or_else(|e| panic!("the JSON form does not parse: {e}"));
            assert_eq!(back, real, "a JSON form does not mean the value");
        }
    }
}

/// `real` at byte offset `pre` of random bytes, encoded whole by `engine`.
fn base64_case(engine: &base64::engine::GeneralPurpose, real: &str, pre: usize, post: usize) {
    let p = ph(real);
    assert_eq!(p.len(), real.len(), "this case needs an equal-length placeholder");
    let pairs = redaction_pairs(real, &p, None);
    let r = replacer(real, &p, None);
    let (head, tail) = (random_bytes(pre), random_bytes(post));
    let text = [head.as_slice(), real.as_bytes(), tail.as_slice()].concat();
    let encoded = engine.encode(&text);
    let (out, hits) = r.replace_all(encoded.as_bytes());
    assert_eq!(hits, 1, "offset {pre}+{post}: {encoded}");
    assert_clean(&out, &pairs, "base64");
    let decoded = engine.decode(&out).unwrap_or_else(|e| panic!("the replaced text is no base64: {e}"));
    let n = real.len();
    assert_eq!(&decoded[..pre], head.as_slice(), "the bytes before changed");
    assert_eq!(&decoded[pre + n..], tail.as_slice(), "the bytes after changed");
    assert_eq!(&decoded[pre + 1..pre + n - 1], &p.as_bytes()[1..n - 1], "the middle is not the placeholder");
}

#[test]
fn base64_forms_are_found_at_every_alignment_std_url_and_unpadded() {
    let plain = token("ghp_");
    let odd = "s3cr\u{e9}t/pa ss\"wo\\rd\n+=?&~endxyzw0123456789".to_string();
    for engine in [&STANDARD, &URL_SAFE, &URL_SAFE_NO_PAD] {
        for real in [&plain, &odd] {
            for pre in 0..7 {
                for post in 0..4 {
                    base64_case(engine, real, pre, post);
                }
            }
        }
    }
}

#[test]
fn the_exact_basic_form_is_replaced_whole() {
    let real = token("ghp_");
    let p = ph(&real);
    let r = replacer(&real, &p, Some("x-access-token"));
    let header = format!("Authorization: Basic {}\r\n", STANDARD.encode(format!("x-access-token:{real}")));
    let (out, hits) = r.replace_all(header.as_bytes());
    assert_eq!(hits, 1);
    let want = format!("Authorization: Basic {}\r\n", STANDARD.encode(format!("x-access-token:{p}")));
    assert_eq!(String::from_utf8_lossy(&out), want);
    // A short password is only replaceable in its Basic form.
    let r = replacer("hunter2", &ph("hunter2"), Some("alice"));
    let (out, hits) = r.replace_all(STANDARD.encode("alice:hunter2").as_bytes());
    assert_eq!(hits, 1);
    let decoded = STANDARD.decode(&out).unwrap_or_default();
    assert!(decoded.starts_with(b"alice:") && !contains(&decoded, b"hunter2"));
}

#[test]
fn an_empty_replacer_changes_nothing() {
    let r = Replacer::new(Vec::new()).unwrap_or_else(|e| panic!("{e}"));
    assert!(r.is_empty() && r.same_length());
    assert_eq!(r.replace_all(b"anything"), (b"anything".to_vec(), 0));
    let mut s = r.stream();
    assert_eq!(s.feed(b"any"), b"any");
    assert_eq!(s.finish(), b"");
    let r = Replacer::new(vec![(Vec::new(), b"x".to_vec())]).unwrap_or_else(|e| panic!("{e}"));
    assert!(r.is_empty(), "an empty pattern would match everywhere");
}

/// Streams `text` split at `cuts`, returning the output and hits.
fn streamed(r: &Replacer, text: &[u8], cuts: &[usize]) -> (Vec<u8>, usize) {
    let mut s = r.stream();
    let mut out = Vec::new();
    let mut at = 0;
    for &cut in cuts {
        out.extend(s.feed(&text[at..cut]));
        at = cut;
    }
    out.extend(s.feed(&text[at..]));
    out.extend(s.finish());
    (out, s.hits())
}

#[test]
fn streaming_equals_one_shot_at_every_split() {
    let real = format!("ghp_{}", random_alnum(36).unwrap_or_default());
    let p = ph(&real);
    let mut pairs = redaction_pairs(&real, &p, Some("x"));
    // Overlapping forms: a shorter pattern that is a prefix of a longer one.
    pairs.push((real.as_bytes()[..20].to_vec(), b"SHORT".to_vec()));
    let r = Replacer::new(pairs).unwrap_or_else(|e| panic!("{e}"));
    let b64 = STANDARD.encode(format!("..{real}.."));
    let text = format!("a{real}{real}b{}c{}end{}", &real[..30], b64, &real[..20]);
    let (want, want_hits) = r.replace_all(text.as_bytes());
    assert_eq!(want_hits, 5, "{text}");
    assert!(!contains(&want, real.as_bytes()));
    let text = text.as_bytes();
    for cut in 0..=text.len() {
        assert_eq!(streamed(&r, text, &[cut]), (want.clone(), want_hits), "split at {cut}");
    }
    for a in (0..text.len()).step_by(7) {
        for b in a..text.len() {
            assert_eq!(streamed(&r, text, &[a, b]), (want.clone(), want_hits), "split at {a}, {b}");
        }
    }
    let every: Vec<usize> = (1..text.len()).collect();
    assert_eq!(streamed(&r, text, &every), (want, want_hits), "byte by byte");
}

#[test]
fn streaming_keeps_back_at_most_the_longest_form_less_one() {
    let r = Replacer::new(vec![(b"0123456789".to_vec(), b"ABCDEFGHIJ".to_vec())]).unwrap_or_else(|e| panic!("{e}"));
    let mut s = r.stream();
    assert_eq!(s.feed(b"hello world, 012"), b"hello w");
    assert_eq!(s.feed(b"3456789 and"), b"orld, ABCDEFGHIJ");
    assert_eq!(s.feed(b" more text"), b" and ");
    assert_eq!(s.finish(), b"more text");
    assert_eq!(s.hits(), 1);
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), Compression::default());
    e.write_all(data).unwrap_or_else(|e| panic!("{e}"));
    e.finish().unwrap_or_else(|e| panic!("{e}"))
}

fn zlib(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::ZlibEncoder::new(Vec::new(), Compression::default());
    e.write_all(data).unwrap_or_else(|e| panic!("{e}"));
    e.finish().unwrap_or_else(|e| panic!("{e}"))
}

fn raw_deflate(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::DeflateEncoder::new(Vec::new(), Compression::default());
    e.write_all(data).unwrap_or_else(|e| panic!("{e}"));
    e.finish().unwrap_or_else(|e| panic!("{e}"))
}

fn decode(encoding: &str, limit: u64, body: &[u8], chunk: usize) -> Result<Vec<u8>, String> {
    let mut d = Decoder::new(encoding, limit)?;
    let mut out = Vec::new();
    for piece in body.chunks(chunk.max(1)) {
        out.extend(d.feed(piece)?);
    }
    out.extend(d.finish()?);
    Ok(out)
}

#[test]
fn gzip_and_deflate_decode_round_trip_in_any_chunking() {
    let mut data = Vec::new();
    for i in 0..20_000u32 {
        data.extend_from_slice(format!("line {i} of a response body; ").as_bytes());
    }
    data.extend(random_bytes(100_000));
    let two_members = [gzip(&data[..1000]), gzip(&data[1000..])].concat();
    for (encoding, body) in [
        ("gzip", gzip(&data)),
        ("x-gzip", gzip(&data)),
        (" GZIP ", two_members),
        ("deflate", zlib(&data)),
        ("deflate", raw_deflate(&data)),
        ("identity", data.clone()),
        ("", data.clone()),
    ] {
        for chunk in [1, 7, 4096, 1 << 20] {
            if chunk == 1 && body.len() > 200_000 {
                continue;
            }
            let out = decode(encoding, 1 << 30, &body, chunk).unwrap_or_else(|e| panic!("{encoding} by {chunk}: {e}"));
            assert!(out == data, "{encoding} by {chunk}: {} bytes back of {}", out.len(), data.len());
        }
    }
    for encoding in ["gzip", "deflate"] {
        assert_eq!(decode(encoding, 10, b"", 10), Ok(Vec::new()), "an empty {encoding} body");
    }
}

#[test]
fn a_decompression_bomb_fails_at_the_limit() {
    let zeros = vec![0u8; 8 << 20];
    for (encoding, body) in [("gzip", gzip(&zeros)), ("deflate", zlib(&zeros)), ("deflate", raw_deflate(&zeros))] {
        assert!(body.len() < 64 << 10, "{}", body.len());
        let err = decode(encoding, 1 << 20, &body, 16 << 10).err().unwrap_or_else(|| panic!("{encoding}: no limit"));
        assert!(err.contains("decompression bomb") && err.contains("1048576"), "{err}");
        let exact = decode(encoding, 8 << 20, &body, 16 << 10).unwrap_or_else(|e| panic!("{encoding}: {e}"));
        assert_eq!(exact.len(), 8 << 20, "a body of exactly the limit decodes");
        assert!(decode(encoding, (8 << 20) - 1, &body, 16 << 10).is_err(), "one byte over the limit");
    }
}

#[test]
fn truncated_corrupt_trailing_and_unknown_encodings_fail() {
    let data = b"a response body that is long enough to compress into a few blocks".repeat(100);
    for (encoding, body) in [("gzip", gzip(&data)), ("deflate", zlib(&data)), ("deflate", raw_deflate(&data))] {
        let cut = &body[..body.len() - 6];
        assert!(decode(encoding, 1 << 20, cut, 100).is_err(), "{encoding}: a truncated stream decoded");
        let trailing = [body.as_slice(), b"garbage!"].concat();
        assert!(decode(encoding, 1 << 20, &trailing, 100).is_err(), "{encoding}: trailing bytes accepted");
        assert!(decode(encoding, 1 << 20, b"\x1f\x8b\x08\x00 not a stream at all", 100).is_err(), "{encoding}");
    }
    let mut flipped = gzip(&data);
    let at = flipped.len() - 5;
    flipped[at] ^= 1;
    assert!(decode("gzip", 1 << 20, &flipped, 100).is_err(), "a bad gzip length or CRC accepted");
    assert!(decode("deflate", 1 << 20, b"x", 1).is_err(), "one byte of deflate");
    for encoding in ["br", "zstd", "compress", "gzip, br", "gzip;q=1"] {
        let err = Decoder::new(encoding, 1 << 20).err().unwrap_or_else(|| panic!("{encoding} accepted"));
        assert!(err.contains("cannot scan") && !err.contains(encoding), "{err}");
    }
}
