//! The fast path for tensor data that is nothing but numbers in arrays, which is what clients
//! send almost always.
//!
//! serde's visitor costs a call and a dispatch per element; this scanner reads the bytes in one
//! loop, parses each number where it stands and pushes it into a `Vec` of the element type.
//! It gives up (returns `None`) on anything it does not handle, a string, a literal, an
//! object, a number that does not fit the dtype, too many or too few elements, deep nesting,
//! and the caller then runs the general decoder, which accepts the same text or words the
//! error. So the fast path never changes an answer; it only makes the common one cheaper.
//!
//! The scanner checks the JSON grammar of what it reads (where `[`, `,` and `]` may stand,
//! and each number's spelling), so it can read text no JSON parser has seen: the KServe
//! decoder lifts large `data` arrays out of a body before parsing the rest
//! (`api/kserve/http/lift.rs`) and gives them straight to this scanner. Text it refuses is
//! never half-accepted: the caller runs the general decoder, which words the error.
//!
//! Long text is cut at commas into pieces read on several threads at once: a megabyte of
//! numbers takes milliseconds to read, which otherwise all land on one core. A piece does not
//! know how deep in the lists it starts, so each records its nesting relative to its start,
//! and the pieces are checked in order once all are read: the same grammar, checked later.

use std::ops::Range;

use super::number::{read, FromNumber};
use super::values::Values;
use crate::tensor::{DataType, ScanHelpers};

/// Nesting deeper than this is left to the general decoder, which enforces serde_json's depth
/// limit and words its error.
const MAX_DEPTH: isize = 64;

/// The least text given to a thread of its own: starting one costs tens of microseconds,
/// reading this much text about a hundred and fifty.
const MIN_PIECE_BYTES: usize = 256 * 1024;

/// Stack for the threads that read pieces: the scanner's frames are small and fixed.
const PIECE_STACK_BYTES: usize = 256 * 1024;

/// The elements of `text` (numbers in arrays nested in any way) in the element type of
/// `dtype`, if there are exactly `count` of them and each converts; `None` otherwise. Free
/// `helpers` read pieces of it when it is long enough to be worth sharing.
pub fn flat_numbers(
    text: &str,
    dtype: DataType,
    count: usize,
    capacity: usize,
    helpers: &ScanHelpers,
) -> Option<Values> {
    let scan = Scan {
        text,
        count,
        capacity,
        helpers,
    };
    Some(match dtype {
        DataType::U8 => Values::U8(scan.run()?),
        DataType::U16 => Values::U16(scan.run()?),
        DataType::U32 => Values::U32(scan.run()?),
        DataType::U64 => Values::U64(scan.run()?),
        DataType::I8 => Values::I8(scan.run()?),
        DataType::I16 => Values::I16(scan.run()?),
        DataType::I32 => Values::I32(scan.run()?),
        DataType::I64 => Values::I64(scan.run()?),
        DataType::F16 => Values::F16(scan.run()?),
        DataType::BF16 => Values::BF16(scan.run()?),
        DataType::F32 => Values::F32(scan.run()?),
        DataType::F64 => Values::F64(scan.run()?),
        // Booleans and strings are rare and small enough for the general decoder.
        DataType::Bool | DataType::String => return None,
    })
}

struct Scan<'t> {
    text: &'t str,
    count: usize,
    capacity: usize,
    helpers: &'t ScanHelpers,
}

impl Scan<'_> {
    fn run<T: FromNumber + Send>(&self) -> Option<Vec<T>> {
        let helpers = self
            .helpers
            .lease((self.text.len() / MIN_PIECE_BYTES).saturating_sub(1));
        let pieces = pieces(self.text, 1 + helpers.count());
        let [whole] = pieces.as_slice() else {
            return self.in_pieces(&pieces);
        };
        let out = Vec::with_capacity(self.capacity.min(self.count));
        let (values, nesting) = read_piece(self.text, whole.clone(), self.count, out)?;
        (values.len() == self.count && nesting.closes_from(0) == Some(0)).then_some(values)
    }

    /// The first piece on the calling thread, each other on a thread of its own (or here too,
    /// when the system will not start one); then the nesting checked piece by piece.
    fn in_pieces<T: FromNumber + Send>(&self, pieces: &[Range<usize>]) -> Option<Vec<T>> {
        let (first, rest) = pieces.split_first()?;
        let text = self.text;
        let count = self.count;
        let read: Vec<Option<(Vec<T>, Nesting)>> = std::thread::scope(|scope| {
            let started: Vec<_> = rest
                .iter()
                .map(|piece| {
                    let (piece, spare) = (piece.clone(), piece.clone());
                    // Reserved here, not on the helper: a fresh thread's allocations come
                    // from fresh pages, which cost a fault each.
                    let capacity = share(count, piece.len(), text.len());
                    let out = Vec::with_capacity(capacity);
                    let thread = std::thread::Builder::new()
                        .name("tensorport-scan".into())
                        .stack_size(PIECE_STACK_BYTES)
                        .spawn_scoped(scope, move || read_piece(text, piece, count, out));
                    (thread, spare, capacity)
                })
                .collect();
            let out = Vec::with_capacity(self.capacity.min(count));
            let mut read = vec![read_piece(text, first.clone(), count, out)];
            for (thread, piece, capacity) in started {
                read.push(match thread {
                    Ok(thread) => thread.join().ok().flatten(),
                    Err(_) => read_piece(text, piece, count, Vec::with_capacity(capacity)),
                });
            }
            read
        });
        let last = read.len() - 1;
        let mut values = Vec::new();
        let mut depth = 0;
        for (index, piece) in read.into_iter().enumerate() {
            let (more, nesting) = piece?;
            depth = if index == last {
                nesting.closes_from(depth)?
            } else {
                nesting.continues_from(depth)?
            };
            if index == 0 {
                values = more;
            } else if values.len() + more.len() <= count {
                values.extend(more);
            } else {
                return None;
            }
        }
        (values.len() == count && depth == 0).then_some(values)
    }
}

/// `text` cut into up to `threads` pieces of at least [`MIN_PIECE_BYTES`], each cut at a
/// comma, which belongs to neither piece.
fn pieces(text: &str, threads: usize) -> Vec<Range<usize>> {
    let wanted = threads.min(text.len() / MIN_PIECE_BYTES).max(1);
    let mut pieces = Vec::with_capacity(wanted);
    let mut start = 0;
    for k in 1..wanted {
        let aim = (text.len() / wanted * k).max(start);
        let Some(comma) = text
            .get(aim..)
            .and_then(|rest| memchr::memchr(b',', rest.as_bytes()))
        else {
            break;
        };
        pieces.push(start..aim + comma);
        start = aim + comma + 1;
    }
    pieces.push(start..text.len());
    pieces
}

/// What to reserve for a piece of `piece_len` bytes out of `text_len`: its share of `count`,
/// and a little more, never more than its text can spell (two bytes an element at least).
fn share(count: usize, piece_len: usize, text_len: usize) -> usize {
    let share = (count as u128 * piece_len as u128 / text_len.max(1) as u128) as usize;
    share
        .saturating_add(share / 16 + 16)
        .min(count)
        .min(piece_len / 2 + 1)
}

/// How a piece of text nests, relative to the depth it starts at, which only the pieces before
/// it know. Every piece starts where a value is wanted: at the text's start or after a comma.
struct Nesting {
    /// The depth at the piece's end.
    end: isize,
    /// The lowest depth after a `]`: its list must have been open.
    lowest_close: isize,
    /// The lowest depth at a `,`: a comma must stand in a list.
    lowest_comma: isize,
    /// The highest depth after a `[`.
    highest: isize,
    /// Whether the piece ends with a complete value (not after `[` or `,`).
    ends_with_value: bool,
}

impl Nesting {
    /// The depth after the piece when it starts at `depth` and a comma follows it.
    fn continues_from(&self, depth: isize) -> Option<isize> {
        let end = self.fits(depth)?;
        (self.ends_with_value && end >= 1).then_some(end)
    }

    /// The depth after the piece when it starts at `depth` and the text ends with it.
    fn closes_from(&self, depth: isize) -> Option<isize> {
        let end = self.fits(depth)?;
        self.ends_with_value.then_some(end)
    }

    fn fits(&self, depth: isize) -> Option<isize> {
        let fits = depth + self.lowest_close >= 0
            && depth.saturating_add(self.lowest_comma) >= 1
            && depth + self.highest <= MAX_DEPTH;
        fits.then_some(depth + self.end)
    }
}

/// The numbers of `text[piece]` appended to `out`, and how the piece nests; `None` if the
/// piece breaks the grammar on its own or holds more than `limit` numbers.
fn read_piece<T: FromNumber>(
    text: &str,
    piece: Range<usize>,
    limit: usize,
    mut out: Vec<T>,
) -> Option<(Vec<T>, Nesting)> {
    let text = text.get(piece)?;
    let bytes = text.as_bytes();
    let mut nesting = Nesting {
        end: 0,
        lowest_close: 0,
        lowest_comma: isize::MAX,
        highest: 0,
        ends_with_value: false,
    };
    let mut depth = 0isize;
    // Whether the grammar wants a value next: at the start, after `[` and after `,`.
    let mut want_value = true;
    // Whether the last token was `[`, so that `]` may close an empty list.
    let mut opened = false;
    let mut i = 0;
    while let Some(&byte) = bytes.get(i) {
        match byte {
            b'-' | b'0'..=b'9' if want_value => {
                let (number, end) = read(text, i)?;
                if out.len() == limit {
                    return None;
                }
                out.push(T::from_number(number, text, i..end)?);
                (want_value, opened) = (false, false);
                i = end;
                continue;
            }
            b'[' if want_value => {
                depth += 1;
                nesting.highest = nesting.highest.max(depth);
                opened = true;
            }
            b']' if opened || !want_value => {
                depth -= 1;
                nesting.lowest_close = nesting.lowest_close.min(depth);
                (want_value, opened) = (false, false);
            }
            b',' if !want_value => {
                nesting.lowest_comma = nesting.lowest_comma.min(depth);
                want_value = true;
            }
            b' ' | b'\n' | b'\r' | b'\t' => {}
            _ => return None,
        }
        i += 1;
    }
    nesting.end = depth;
    nesting.ends_with_value = !want_value;
    Some((out, nesting))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_that_is_not_json_is_refused_not_read() {
        for text in [
            "", "[", "]", "[1,]", "[,1]", "[1 2]", "[1,,2]", "[[1]2]", "[1][2]", "1 2", "[01]",
            "[-]", "[1.]", "[.5]", "[1e]", "[1e+]", "[+1]", "[1-2]", "[1.5.3]", "[[1],]", "[]]",
            "[[]", "-", "[1]]", "[0x1]",
        ] {
            assert!(
                flat_numbers(text, DataType::F64, 1, 1, &ScanHelpers::none()).is_none()
                    && flat_numbers(text, DataType::F64, 2, 2, &ScanHelpers::none()).is_none()
                    && flat_numbers(text, DataType::F64, 0, 0, &ScanHelpers::none()).is_none(),
                "{text:?}"
            );
            assert!(
                serde_json::from_str::<serde_json::Value>(text).is_err() || !text.starts_with('['),
                "{text:?} is JSON"
            );
        }
        for (text, count) in [("[]", 0), ("[[], []]", 0), (" [ 1 , [ 2 ] ] ", 2), ("7", 1)] {
            assert!(
                flat_numbers(text, DataType::F64, count, count, &ScanHelpers::none()).is_some(),
                "{text:?}"
            );
        }
    }

    #[test]
    fn anything_unusual_is_left_to_the_general_decoder() {
        assert!(flat_numbers("[1, \"NaN\"]", DataType::F32, 2, 2, &ScanHelpers::none()).is_none());
        assert!(flat_numbers("[1, 2, 3]", DataType::F32, 2, 2, &ScanHelpers::none()).is_none());
        assert!(flat_numbers("[1, 2]", DataType::F32, 3, 3, &ScanHelpers::none()).is_none());
        assert!(flat_numbers("[1.5]", DataType::I32, 1, 1, &ScanHelpers::none()).is_none());
        assert!(flat_numbers("[300]", DataType::U8, 1, 1, &ScanHelpers::none()).is_none());
        assert!(flat_numbers("[null]", DataType::F64, 1, 1, &ScanHelpers::none()).is_none());
        let deep = format!("{}1{}", "[".repeat(100), "]".repeat(100));
        assert!(flat_numbers(&deep, DataType::I8, 1, 1, &ScanHelpers::none()).is_none());
        assert!(matches!(
            flat_numbers("[[1, -2], [3e0 ,\n4.5]]", DataType::F32, 4, 4, &ScanHelpers::none()),
            Some(Values::F32(v)) if v == [1.0, -2.0, 3.0, 4.5]
        ));
    }

    /// Every way of cutting each text at one or two of its commas reads as the whole text
    /// does: the same numbers, or refused.
    #[test]
    fn text_read_in_pieces_reads_as_one_piece() {
        let texts = [
            "[1, 2, 3, 4]",
            "[[1, 2], [3, 4], [5, 6]]",
            "[[[1], [2]], [[3], [4]]]",
            "[[], [1], [], [2, 3]]",
            "[1, [2, [3, [4, 5]]], 6]",
            "[1, 2], [3]",
            "[1, 2]], [3]",
            "[[1, 2], 3",
            "[1,, 2]",
            "[1, 2,]",
            "[1, 2 3, 4]",
            "[1, \"2\", 3]",
            "[1, [, 2]",
            "[1, ], 2]",
            "1, 2",
            "[1], 2",
            "[1, 2]]",
            "[[1, 2, 3]",
            " [ -1.5e3 , 2 ,\n 3 ] ",
        ];
        for text in texts {
            let commas: Vec<usize> = text.match_indices(',').map(|(at, _)| at).collect();
            for count in 0..8 {
                let whole = scan(text, count).run::<f64>();
                let mut cuts: Vec<Vec<usize>> = commas.iter().map(|&c| vec![c]).collect();
                for (i, &a) in commas.iter().enumerate() {
                    cuts.extend(commas.iter().skip(i + 1).map(|&b| vec![a, b]));
                }
                for cut in cuts {
                    let mut pieces = Vec::new();
                    let mut start = 0;
                    for &comma in &cut {
                        pieces.push(start..comma);
                        start = comma + 1;
                    }
                    pieces.push(start..text.len());
                    let split = scan(text, count).in_pieces::<f64>(&pieces);
                    assert_eq!(split, whole, "{text:?} count {count} cut at {cut:?}");
                }
            }
        }
    }

    #[test]
    fn nesting_past_the_limit_is_refused_across_pieces() {
        let deep = format!("[{}1, 2{}]", "[".repeat(64), "]".repeat(64));
        let comma = deep.find(',').unwrap_or_default();
        let pieces = [0..comma, comma + 1..deep.len()];
        assert!(scan(&deep, 2).in_pieces::<f64>(&pieces).is_none());
        assert!(scan(&deep, 2).run::<f64>().is_none());
        let fits = format!("[{}1, 2{}]", "[".repeat(63), "]".repeat(63));
        let comma = fits.find(',').unwrap_or_default();
        let pieces = [0..comma, comma + 1..fits.len()];
        assert_eq!(
            scan(&fits, 2).in_pieces::<f64>(&pieces),
            Some(vec![1.0, 2.0])
        );
        assert_eq!(scan(&fits, 2).run::<f64>(), Some(vec![1.0, 2.0]));
    }

    #[test]
    fn long_text_is_cut_at_commas_into_pieces_of_the_least_size() {
        let text = format!("[{}1]", "1, ".repeat(3 * MIN_PIECE_BYTES / 3));
        let pieces = pieces(&text, 4);
        assert_eq!(pieces.len(), 3);
        for pair in pieces.windows(2) {
            assert_eq!(text.as_bytes()[pair[0].end], b',');
            assert_eq!(pair[0].end + 1, pair[1].start);
        }
        assert_eq!(pieces.last().map(|p| p.end), Some(text.len()));
        assert_eq!(super::pieces(&text, 1).len(), 1);
        assert_eq!(super::pieces("[1, 2]", 4).len(), 1);
        let count = MIN_PIECE_BYTES + 1;
        let read = flat_numbers(&text, DataType::I32, count, count, &ScanHelpers::new(3));
        assert!(
            matches!(read, Some(Values::I32(v)) if v.len() == count && v.iter().all(|&n| n == 1))
        );
        // A cut that leaves the text ill-formed is refused whichever piece holds the fault.
        let broken = format!("{}]", &text[..text.len() - 1].replacen("1, 1", "1,, 1", 1));
        assert!(flat_numbers(&broken, DataType::I32, count, count, &ScanHelpers::new(3)).is_none());
        let broken_late = format!("{}, x]", &text[..text.len() - 1]);
        assert!(flat_numbers(
            &broken_late,
            DataType::I32,
            count + 1,
            count + 1,
            &ScanHelpers::new(3)
        )
        .is_none());
    }

    static NO_HELPERS: ScanHelpers = ScanHelpers::none();

    fn scan(text: &str, count: usize) -> Scan<'_> {
        Scan {
            text,
            count,
            capacity: count,
            helpers: &NO_HELPERS,
        }
    }
}
