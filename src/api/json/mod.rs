//! The JSON tensor codec both REST protocols use: request bodies parsed with TF Serving's
//! non-finite literals ([`body`]), tensor data decoded straight from the text into typed
//! buffers ([`decode`], with the number scanner and the shape pass beneath it), and tensors
//! written back as JSON ([`encode`]).
//!
//! Below the entry points, each file one step of the work: [`lift`] takes large number lists
//! out of a body before its envelope is parsed, [`shape`] reads the shape of rectangular
//! lists, [`scan`] reads the numbers (one at a time through [`number`]), [`walk`] is serde's
//! general path for everything else, and [`values`] is the typed buffer they all fill.

pub mod body;
pub mod decode;
pub mod encode;
pub(super) mod lift;
mod number;
#[cfg(test)]
mod round_trip;
mod scan;
mod shape;
mod values;
mod walk;
