//! A system shared-memory region for KServe runs: the inputs written once before the run,
//! and one output area per slot so that concurrent requests do not write over each other.

use tensorport_client::ShmRegion;

use crate::config::Config;
use crate::error::LoadgenError;
use crate::payload::InputData;

/// Where one tensor lives in the region.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placement {
    pub offset: usize,
    pub size: usize,
}

/// A request body's shared-memory placement: the layout and the slot for its outputs, or
/// `None` for tensors on the wire.
pub type Placed<'a> = Option<(&'a ShmLayout, usize)>;

/// Offsets in the region: inputs (shared by every request) and outputs per slot.
#[derive(Debug, Clone)]
pub struct ShmLayout {
    pub region: String,
    pub inputs: Vec<Placement>,
    outputs: Vec<Vec<Placement>>,
    pub byte_size: usize,
}

/// Tensors start on 64-byte boundaries, as ONNX Runtime prefers.
const ALIGN: usize = 64;

fn align(offset: usize) -> usize {
    offset.div_ceil(ALIGN) * ALIGN
}

impl ShmLayout {
    pub fn new(
        region: String,
        input_sizes: &[usize],
        output_sizes: &[usize],
        slots: usize,
    ) -> Self {
        let mut end = 0;
        let mut place = |size: usize| {
            let offset = align(end);
            end = offset + size;
            Placement { offset, size }
        };
        let inputs = input_sizes.iter().map(|&s| place(s)).collect();
        let outputs = (0..slots.max(1))
            .map(|_| output_sizes.iter().map(|&s| place(s)).collect())
            .collect();
        Self {
            region,
            inputs,
            outputs,
            byte_size: align(end).max(ALIGN),
        }
    }

    pub fn slots(&self) -> usize {
        self.outputs.len()
    }

    /// The output placements of `slot` (modulo the number of slots).
    pub fn output_slot(&self, slot: usize) -> Vec<Placement> {
        self.outputs[slot % self.outputs.len()].clone()
    }
}

/// The region and its layout, unlinked when dropped.
pub struct ShmSetup {
    pub region: ShmRegion,
    pub layout: ShmLayout,
}

impl ShmSetup {
    /// Creates `/dev/shm/tensorport-loadgen-PID` and writes the inputs into it.
    pub fn create(
        config: &Config,
        data: &[InputData<'_>],
        slots: usize,
    ) -> Result<Self, LoadgenError> {
        let name = format!("tensorport-loadgen-{}", std::process::id());
        let input_sizes: Vec<usize> = data.iter().map(|d| d.values.len() * 4).collect();
        let output_sizes: Vec<usize> = config
            .outputs
            .iter()
            .map(|o| o.row_elements * config.batch * 4)
            .collect();
        let layout = ShmLayout::new(name.clone(), &input_sizes, &output_sizes, slots);
        let mut region = ShmRegion::create(&name, layout.byte_size)
            .map_err(|err| LoadgenError::SharedMemory(err.to_string()))?;
        for (input, place) in data.iter().zip(&layout.inputs) {
            region
                .write(place.offset, &input.values)
                .map_err(|err| LoadgenError::SharedMemory(err.to_string()))?;
        }
        Ok(Self { region, layout })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_do_not_overlap_and_are_aligned() {
        let layout = ShmLayout::new("r".into(), &[100, 8], &[4], 3);
        assert_eq!(
            layout.inputs[0],
            Placement {
                offset: 0,
                size: 100
            }
        );
        assert_eq!(layout.inputs[1].offset, 128);
        let outs: Vec<usize> = (0..3).map(|s| layout.output_slot(s)[0].offset).collect();
        assert_eq!(outs, vec![192, 256, 320]);
        assert_eq!(layout.output_slot(3), layout.output_slot(0));
        assert_eq!(layout.byte_size, 384);
    }
}
