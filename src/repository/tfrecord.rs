//! TFRecord files, the container of TF Serving's warmup logs: a sequence of records, each
//!
//! ```text
//! u64 length (little-endian) | u32 masked CRC-32C of the length bytes
//! length bytes of data       | u32 masked CRC-32C of the data
//! ```
//!
//! Every checksum is verified, so a truncated or corrupted file is refused as a whole.

use crc::{Crc, CRC_32_ISCSI};

/// CRC-32C (Castagnoli), the checksum TFRecord uses.
const CRC32C: Crc<u32> = Crc::<u32>::new(&CRC_32_ISCSI);
/// TFRecord stores checksums rotated and offset, so that a CRC of data that itself holds
/// CRCs stays well distributed.
const MASK_DELTA: u32 = 0xa282_ead8;

/// Why a TFRecord file was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    #[error("record {record} is truncated at byte {offset}")]
    Truncated { record: usize, offset: usize },
    #[error("record {record}: the checksum of its length does not match")]
    LengthChecksum { record: usize },
    #[error("record {record}: the checksum of its data does not match")]
    DataChecksum { record: usize },
}

/// The masked CRC-32C TFRecord stores for `bytes`.
pub fn masked_crc(bytes: &[u8]) -> u32 {
    let crc = CRC32C.checksum(bytes);
    crc.rotate_right(15).wrapping_add(MASK_DELTA)
}

/// The records of a TFRecord file's contents, each checked.
pub fn records(file: &[u8]) -> Result<Vec<&[u8]>, RecordError> {
    let mut out = Vec::new();
    let mut rest = file;
    while !rest.is_empty() {
        let record = out.len();
        let offset = file.len() - rest.len();
        let truncated = RecordError::Truncated { record, offset };
        let (header, after) = rest.split_at_checked(12).ok_or(truncated)?;
        let (length_bytes, length_crc) = header.split_at(8);
        if u32_le(length_crc) != masked_crc(length_bytes) {
            return Err(RecordError::LengthChecksum { record });
        }
        let length = usize::try_from(u64::from_le_bytes(
            length_bytes.try_into().map_err(|_| truncated)?,
        ))
        .map_err(|_| truncated)?;
        // The length is checked against what the file holds before anything is sliced.
        let data_end = length.checked_add(4).ok_or(truncated)?;
        let (body, after) = after.split_at_checked(data_end).ok_or(truncated)?;
        let (data, data_crc) = body.split_at(length);
        if u32_le(data_crc) != masked_crc(data) {
            return Err(RecordError::DataChecksum { record });
        }
        out.push(data);
        rest = after;
    }
    Ok(out)
}

fn u32_le(bytes: &[u8]) -> u32 {
    let mut word = [0u8; 4];
    word.copy_from_slice(bytes);
    u32::from_le_bytes(word)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One record in TFRecord framing.
    fn frame(data: &[u8]) -> Vec<u8> {
        let length = (data.len() as u64).to_le_bytes();
        let mut out = Vec::with_capacity(data.len() + 16);
        out.extend_from_slice(&length);
        out.extend_from_slice(&masked_crc(&length).to_le_bytes());
        out.extend_from_slice(data);
        out.extend_from_slice(&masked_crc(data).to_le_bytes());
        out
    }

    #[test]
    fn crc32c_matches_the_published_check_value() {
        // CRC-32C of "123456789" is 0xE3069283 (RFC 3720, appendix B.4).
        assert_eq!(CRC32C.checksum(b"123456789"), 0xe306_9283);
    }

    #[test]
    fn reads_back_framed_records() -> Result<(), RecordError> {
        let mut file = frame(b"first");
        file.extend(frame(b""));
        file.extend(frame(b"third record"));
        let records = records(&file)?;
        assert_eq!(records, vec![&b"first"[..], b"", b"third record"]);
        assert_eq!(super::records(&[])?, Vec::<&[u8]>::new());
        Ok(())
    }

    #[test]
    fn refuses_damaged_files() {
        let good = frame(b"payload");
        let mut data = good.clone();
        data[13] ^= 1;
        assert_eq!(records(&data), Err(RecordError::DataChecksum { record: 0 }));
        let mut length = good.clone();
        length[0] ^= 1;
        assert_eq!(
            records(&length),
            Err(RecordError::LengthChecksum { record: 0 })
        );
        let mut two = good.clone();
        two.extend_from_slice(&good[..good.len() - 1]);
        assert_eq!(
            records(&two),
            Err(RecordError::Truncated {
                record: 1,
                offset: good.len()
            })
        );
        // A length far beyond the file is refused without allocating for it.
        let huge = u64::MAX.to_le_bytes();
        let mut lie = huge.to_vec();
        lie.extend_from_slice(&masked_crc(&huge).to_le_bytes());
        assert!(matches!(
            records(&lie),
            Err(RecordError::Truncated { record: 0, .. })
        ));
    }
}
