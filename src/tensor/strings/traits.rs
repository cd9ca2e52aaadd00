//! [`Strings`] through the standard traits: built from handles, compared with each other or
//! with slices of byte strings, and iterated by reference.

use bytes::Bytes;

use super::elements::{Iter, Strings};

impl From<Vec<Bytes>> for Strings {
    fn from(handles: Vec<Bytes>) -> Self {
        Self::from_handles(handles)
    }
}

/// Equal when the elements are, however each side holds them.
impl PartialEq for Strings {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl<T: AsRef<[u8]>> PartialEq<[T]> for Strings {
    fn eq(&self, other: &[T]) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter().map(AsRef::as_ref))
    }
}

impl<T: AsRef<[u8]>, const N: usize> PartialEq<[T; N]> for Strings {
    fn eq(&self, other: &[T; N]) -> bool {
        *self == other[..]
    }
}

impl<T: AsRef<[u8]>, const N: usize> PartialEq<[T; N]> for &Strings {
    fn eq(&self, other: &[T; N]) -> bool {
        **self == other[..]
    }
}

impl<'s> IntoIterator for &'s Strings {
    type Item = &'s [u8];
    type IntoIter = Iter<'s>;

    fn into_iter(self) -> Iter<'s> {
        self.iter()
    }
}
