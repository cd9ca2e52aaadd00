//! TFRecord framing for written logs, as `tf.data.TFRecordDataset` reads it (uncompressed):
//!
//! ```text
//! u64 length (little-endian) | u32 masked CRC-32C of the 8 length bytes
//! length bytes of data       | u32 masked CRC-32C of the data
//! ```

use crc::{Crc, CRC_32_ISCSI};

/// CRC-32C (Castagnoli), the checksum TFRecord uses.
const CRC32C: Crc<u32> = Crc::<u32>::new(&CRC_32_ISCSI);
/// TFRecord stores each checksum rotated and offset by this, so that a CRC over data that
/// itself holds CRCs stays well distributed.
const MASK_DELTA: u32 = 0xa282_ead8;

/// Bytes a record of `len` data bytes takes in a file.
pub const fn framed_len(len: usize) -> usize {
    len + 16
}

/// The masked CRC-32C of `bytes`: `((crc >> 15) | (crc << 17)) + 0xa282ead8`.
pub fn masked_crc(bytes: &[u8]) -> u32 {
    CRC32C
        .checksum(bytes)
        .rotate_right(15)
        .wrapping_add(MASK_DELTA)
}

/// Appends `data` as one framed record to `out`.
pub fn frame_into(data: &[u8], out: &mut Vec<u8>) {
    let length = (data.len() as u64).to_le_bytes();
    out.reserve(framed_len(data.len()));
    out.extend_from_slice(&length);
    out.extend_from_slice(&masked_crc(&length).to_le_bytes());
    out.extend_from_slice(data);
    out.extend_from_slice(&masked_crc(data).to_le_bytes());
}

/// Starts a record of `len` data bytes in `out`: its length and the length's checksum. The
/// data follows; [`end_frame`], given the returned offset, closes it.
pub fn begin_frame(len: usize, out: &mut Vec<u8>) -> usize {
    let length = (len as u64).to_le_bytes();
    out.reserve(framed_len(len));
    out.extend_from_slice(&length);
    out.extend_from_slice(&masked_crc(&length).to_le_bytes());
    out.len()
}

/// Appends the checksum of the data written since `start`.
pub fn end_frame(start: usize, out: &mut Vec<u8>) {
    let crc = masked_crc(out.get(start..).unwrap_or_default());
    out.extend_from_slice(&crc.to_le_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_checksum_is_crc32c_with_tensorflows_mask() {
        // CRC-32C of "123456789" is 0xE3069283 (RFC 3720, appendix B.4).
        let crc: u32 = 0xe306_9283;
        assert_eq!(CRC32C.checksum(b"123456789"), crc);
        let masked = crc.rotate_right(15).wrapping_add(0xa282_ead8);
        assert_eq!(masked_crc(b"123456789"), masked);
        assert_eq!(masked, 0xc78a_b0e5);
        // CRC-32C of no bytes is 0, so the mask alone remains.
        assert_eq!(masked_crc(b""), 0xa282_ead8);
    }

    #[test]
    fn a_record_is_framed_byte_for_byte() {
        let mut out = Vec::new();
        frame_into(b"123456789", &mut out);
        // The masked checksums of the length (9 as eight little-endian bytes) and of the data,
        // computed apart from this code.
        let mut expected = 9u64.to_le_bytes().to_vec();
        expected.extend_from_slice(&0x3971_f937u32.to_le_bytes());
        expected.extend_from_slice(b"123456789");
        expected.extend_from_slice(&0xc78a_b0e5u32.to_le_bytes());
        assert_eq!(out, expected);
        assert_eq!(out.len(), framed_len(9));
        assert_eq!(&out[..8], &[9, 0, 0, 0, 0, 0, 0, 0]);
    }

    #[test]
    fn an_empty_record_has_both_checksums() {
        let mut out = Vec::new();
        frame_into(b"", &mut out);
        assert_eq!(out.len(), 16);
        assert_eq!(&out[..8], &[0u8; 8]);
        // The length checksum covers the eight zero bytes; the data checksum covers nothing.
        assert_eq!(out[8..12], 0x0798_0329u32.to_le_bytes());
        assert_eq!(out[12..], 0xa282_ead8u32.to_le_bytes());
    }
}
