//! The one glob matcher: `*` and `?` within a name, `**` over whole path
//! components. Both levels match in O(pattern × subject) steps (the classic
//! iterative wildcard match, which backtracks only to the last star), so a
//! guest-supplied path cannot make a pattern take exponential time.

/// Whether a pattern has glob characters.
pub fn is_glob(pattern: &str) -> bool {
    pattern.contains(['*', '?'])
}

/// Whether `name` matches `pattern`: `*` any run of characters (none
/// included), `?` exactly one, anything else itself.
///
/// No allocation for ASCII (the wasm guard matches every path a component
/// opens while a pattern is in force); other text is compared by characters.
pub fn matches(pattern: &str, name: &str) -> bool {
    if pattern.is_ascii() && name.is_ascii() {
        return wildcard(pattern.as_bytes(), name.as_bytes(), |c| *c == b'*', |pc, nc| *pc == b'?' || pc == nc);
    }
    let p: Vec<char> = pattern.chars().collect();
    let n: Vec<char> = name.chars().collect();
    wildcard(&p, &n, |c| *c == '*', |pc, nc| *pc == '?' || pc == nc)
}

/// Whether the path components `path` match the pattern components `pat`:
/// `**` any run of components (none included), any other pattern component
/// one component by [`matches`].
pub fn matches_components(pat: &[&str], path: &[&str]) -> bool {
    wildcard(pat, path, |c| *c == "**", |p, s| matches(p, s))
}

/// The iterative wildcard match over any elements: `star` says which pattern
/// elements match any run of subject elements, `one` whether a pattern element
/// matches one subject element. On a mismatch it retries from the last star,
/// one subject element further; earlier stars never need revisiting, so the
/// work is at most `pattern.len() × subject.len()` element comparisons.
fn wildcard<P, S>(pattern: &[P], subject: &[S], star: impl Fn(&P) -> bool, one: impl Fn(&P, &S) -> bool) -> bool {
    let (mut p, mut s) = (0, 0);
    // The last star seen and the subject position it was tried against.
    let mut back: Option<(usize, usize)> = None;
    while s < subject.len() {
        if p < pattern.len() && star(&pattern[p]) {
            back = Some((p, s));
            p += 1;
        } else if p < pattern.len() && one(&pattern[p], &subject[s]) {
            p += 1;
            s += 1;
        } else if let Some((bp, bs)) = back {
            // Let the last star take one more element, and try again after it.
            back = Some((bp, bs + 1));
            p = bp + 1;
            s = bs + 1;
        } else {
            return false;
        }
    }
    pattern[p..].iter().all(star)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert!(matches("*", "anything"));
        assert!(matches("*", ""));
        assert!(matches("git_*", "git_status"));
        assert!(matches("git_*", "git_"));
        assert!(!matches("git_*", "agit_status"));
        assert!(matches("*_file", "read_file"));
        assert!(!matches("*_file", "read_files"));
        assert!(matches("a*b*c", "aXbYc"));
        assert!(!matches("a*b*c", "aXcYb"));
        assert!(!matches("ab*ba", "aba"));
        assert!(matches("secret?", "secret1"));
        assert!(!matches("secret?", "secret"));
        assert!(matches("*.pem", "é.pem"), "characters, not bytes");
        assert!(matches("?.pem", "é.pem"));
        assert!(matches("**", "x"));
        assert!(matches("a**b", "ab"));
    }

    #[test]
    fn components() {
        let m = |p: &str, s: &str| {
            let p: Vec<&str> = p.split('/').filter(|c| !c.is_empty()).collect();
            let s: Vec<&str> = s.split('/').filter(|c| !c.is_empty()).collect();
            matches_components(&p, &s)
        };
        assert!(m("/w/**/*.pem", "/w/a.pem"));
        assert!(m("/w/**/*.pem", "/w/a/b/c.pem"));
        assert!(!m("/w/**/*.pem", "/w/a/b/c.pem.txt"));
        assert!(!m("/w/**/*.pem", "/v/a.pem"));
        assert!(m("/w/*/secret?", "/w/a/secret1"));
        assert!(!m("/w/*/secret?", "/w/a/b/secret1"));
        assert!(m("/w/**", "/w"));
        assert!(m("/w/**/.git/**/hooks", "/w/a/.git/modules/b/hooks"));
        assert!(!m("/w/**/.git/**/hooks", "/w/a/.git"));
        assert!(m("**", ""));
    }

    /// The patterns that made the recursive matcher exponential end at once
    /// (the counter bounds the comparisons, so this test cannot pass slowly).
    #[test]
    fn no_pattern_backtracks_exponentially() {
        let name = "a".repeat(200);
        let pattern = format!("{}b", "*a".repeat(20));
        let p: Vec<char> = pattern.chars().collect();
        let n: Vec<char> = name.chars().collect();
        let count = std::cell::Cell::new(0u64);
        let matched = wildcard(
            &p,
            &n,
            |c| *c == '*',
            |pc, nc| {
                count.set(count.get() + 1);
                pc == nc
            },
        );
        assert!(!matched);
        assert!(count.get() <= ((p.len() + 1) * (n.len() + 1)) as u64, "{} comparisons", count.get());
        let path: Vec<&str> = std::iter::repeat_n("a", 200).collect();
        let pat: Vec<&str> = std::iter::repeat_n(["**", "a"], 20).flatten().chain(["b"]).collect();
        assert!(!matches_components(&pat, &path));
    }
}
