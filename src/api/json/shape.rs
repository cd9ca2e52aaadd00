//! The shape of TF Serving JSON tensor data that is nothing but numbers in rectangular lists,
//! read in one pass over the bytes without parsing a number, so that the number scanner
//! (`api/json/scan.rs`) can fill the tensor knowing its element count.
//!
//! Elements are counted by the commas between them, which is their number in any text the
//! scanner accepts; a text it does not accept ("[1,,2]", "[1 2]") is decoded the general way
//! whatever shape was counted here.
//!
//! Like the scanner, it gives up (returns `None`) on anything it does not handle: an empty
//! list, a string, a literal, lists of different lengths at one depth, numbers at two depths,
//! deep nesting. The caller then decodes the text the general way, which accepts it or words
//! the error, so the answer never depends on which way was taken.

/// Nesting deeper than this is left to the general decoder.
const MAX_DEPTH: usize = 64;

/// Bytes looked at together where a list of numbers goes on without a bracket.
const BLOCK: usize = 64;

/// A byte a number, a comma or whitespace may contain.
#[inline]
fn is_number_byte(b: u8) -> bool {
    b.is_ascii_digit()
        | matches!(
            b,
            b',' | b'.' | b'-' | b'+' | b'e' | b'E' | b' ' | b'\n' | b'\r' | b'\t'
        )
}

/// The shape of `text`: `[]` for one number, the list lengths from the outside in otherwise.
pub fn rectangular(text: &str) -> Option<Vec<usize>> {
    // The length of every list at each depth, once the first list there has closed (inner
    // lists close first).
    let mut dims: Vec<Option<usize>> = Vec::new();
    // Elements so far in the list open at each depth.
    let mut counts: Vec<usize> = Vec::new();
    // The depth numbers sit at, once one has been seen.
    let mut rank: Option<usize> = None;
    let mut depth = 0usize;
    let bytes = text.as_bytes();
    let mut at = 0;
    while let Some(&byte) = bytes.get(at) {
        match byte {
            b'[' => {
                if rank.is_some_and(|rank| depth >= rank) || depth >= MAX_DEPTH {
                    return None;
                }
                if depth > 0 {
                    *counts.get_mut(depth - 1)? += 1;
                }
                if counts.len() == depth {
                    counts.push(0);
                }
                *counts.get_mut(depth)? = 0;
                depth += 1;
            }
            b']' => {
                depth = depth.checked_sub(1)?;
                let len = *counts.get(depth)?;
                if len == 0 {
                    return None;
                }
                if dims.len() <= depth {
                    dims.resize(depth + 1, None);
                }
                let known = dims.get_mut(depth)?;
                match *known {
                    None => *known = Some(len),
                    Some(known) if known != len => return None,
                    Some(_) => {}
                }
            }
            b'-' | b'0'..=b'9' => {
                match rank {
                    None => rank = Some(depth),
                    Some(rank) if rank != depth => return None,
                    Some(_) => {}
                }
                // A list's first number counts it; each comma after counts one more.
                if depth > 0 {
                    let count = counts.get_mut(depth - 1)?;
                    if *count == 0 {
                        *count = 1;
                    }
                }
                // The rest of the number, in one tight loop: its spelling is the scanner's
                // to check.
                at += 1;
                while let Some(b'0'..=b'9' | b'.' | b'e' | b'E' | b'+' | b'-') = bytes.get(at) {
                    at += 1;
                }
                // Within a list of numbers that has its first, whole blocks with no bracket
                // and nothing foreign are counted by their commas at once; the check and the
                // count are branch-free so that they vectorise.
                if depth > 0 {
                    let count = counts.get_mut(depth - 1)?;
                    while let Some(block) = bytes.get(at..).and_then(<[u8]>::first_chunk::<BLOCK>) {
                        // Two separate folds over a fixed-size block: each compiles to vector
                        // compares (a fold carrying both results at once does not).
                        let plain = block
                            .iter()
                            .fold(true, |plain, &b| plain & is_number_byte(b));
                        if !plain {
                            break;
                        }
                        let commas = block.iter().fold(0u8, |n, &b| n + u8::from(b == b','));
                        *count += usize::from(commas);
                        at += BLOCK;
                    }
                    // A block may end inside a number: its rest is not a number's start.
                    while let Some(b'0'..=b'9' | b'.' | b'e' | b'E' | b'+' | b'-') = bytes.get(at) {
                        at += 1;
                    }
                }
                continue;
            }
            b',' => {
                // Between numbers (between lists, the next list's `[` counts).
                if rank == Some(depth) && depth > 0 {
                    *counts.get_mut(depth - 1)? += 1;
                }
            }
            b' ' | b'\n' | b'\r' | b'\t' => {}
            _ => return None,
        }
        at += 1;
    }
    let rank = rank?;
    if depth != 0 || dims.len() != rank {
        return None;
    }
    dims.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rectangular_lists_of_numbers_have_a_shape() {
        assert_eq!(rectangular("7"), Some(vec![]));
        assert_eq!(rectangular(" -1.5e3 "), Some(vec![]));
        assert_eq!(rectangular("[1, 2, 3]"), Some(vec![3]));
        assert_eq!(rectangular("[[1, 2], [3, 4], [5, 6]]"), Some(vec![3, 2]));
        assert_eq!(rectangular("[[[1],[2]],[[3],[4]]]"), Some(vec![2, 2, 1]));
    }

    #[test]
    fn long_lists_are_counted_by_their_commas_in_blocks() {
        let row = |n: usize| {
            let values: Vec<String> = (0..n).map(|i| format!("{}.125e-3", i % 89)).collect();
            format!("[{}]", values.join(",\n "))
        };
        for n in [1, 2, 63, 64, 65, 1000, 4099] {
            assert_eq!(rectangular(&row(n)), Some(vec![n]), "{n}");
            let rows = format!("[{}, {}, {}]", row(n), row(n), row(n));
            assert_eq!(rectangular(&rows), Some(vec![3, n]), "{n}");
        }
        // One row shorter than the others, far from its start, is still ragged.
        let ragged = format!("[{}, {}]", row(3000), row(2999));
        assert_eq!(rectangular(&ragged), None);
        // A string or a literal deep in a long list still stops the count.
        let long = row(3000);
        for foreign in ["\"x\"", "true", "null", "NaN", "[1]"] {
            let text = format!("{}, {foreign}]", &long[..long.len() - 1]);
            assert_eq!(rectangular(&text), None, "{foreign}");
        }
    }

    #[test]
    fn anything_else_is_left_to_the_general_decoder() {
        for text in [
            "",
            "[]",
            "[[], []]",
            "[[1, 2], [3]]",
            "[[1], 2]",
            "[1, [2]]",
            "[\"a\"]",
            "[true]",
            "[null]",
            "[1, NaN]",
            "[[1, 2], [3, 4]",
            "[1]]",
            "{\"b64\": \"AA==\"}",
            "[[1],[2,3]]",
        ] {
            assert_eq!(rectangular(text), None, "{text:?}");
        }
        let deep = format!("{}1{}", "[".repeat(100), "]".repeat(100));
        assert_eq!(rectangular(&deep), None);
    }
}
