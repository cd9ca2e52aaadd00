//! The `tensorflow.ConfigProto` bytes a session is created with: only the thread settings, so
//! they are written by hand rather than by compiling TensorFlow's config.proto.

use prost::encoding::{bool, int32};

/// `ConfigProto.intra_op_parallelism_threads`.
const INTRA_OP_FIELD: u32 = 2;
/// `ConfigProto.inter_op_parallelism_threads`.
const INTER_OP_FIELD: u32 = 5;
/// `ConfigProto.use_per_session_threads`: without it every session shares one process-wide
/// inter-op pool sized by the first session, and per-model settings would not hold.
const PER_SESSION_THREADS_FIELD: u32 = 9;

/// Serialised `ConfigProto` for `intra_op` / `inter_op` threads; 0 leaves TensorFlow's choice.
pub fn thread_config(intra_op: usize, inter_op: usize) -> Vec<u8> {
    let mut bytes = Vec::new();
    if intra_op > 0 {
        int32::encode(INTRA_OP_FIELD, &clamp(intra_op), &mut bytes);
    }
    if inter_op > 0 {
        int32::encode(INTER_OP_FIELD, &clamp(inter_op), &mut bytes);
        bool::encode(PER_SESSION_THREADS_FIELD, &true, &mut bytes);
    }
    bytes
}

fn clamp(threads: usize) -> i32 {
    i32::try_from(threads).unwrap_or(i32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_the_two_thread_fields() {
        // Field 2 varint 2, field 5 varint 5, field 9 true.
        assert_eq!(thread_config(2, 5), vec![0x10, 2, 0x28, 5, 0x48, 1]);
        assert_eq!(thread_config(0, 0), Vec::<u8>::new());
        assert_eq!(thread_config(300, 0), vec![0x10, 0xac, 0x02]);
    }
}
