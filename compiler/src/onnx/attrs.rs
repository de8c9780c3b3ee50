//! Typed access to a node's attributes, with errors that name the attribute and the type it should have.

use stowage_runtime::Tensor;

use super::proto::{attribute_proto::AttributeType, AttributeProto, NodeProto};

/// Why an attribute could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttrError {
    /// The attribute's name.
    pub attr: String,
    /// What is wrong with it.
    pub message: String,
}

impl AttrError {
    pub(crate) fn new(attr: &str, message: impl Into<String>) -> Self {
        AttrError { attr: attr.to_string(), message: message.into() }
    }
}

/// A node's attributes.
pub(crate) struct Attrs<'a>(pub &'a NodeProto);

fn kind(a: &AttributeProto) -> AttributeType {
    match a.r#type() {
        AttributeType::Undefined => {
            // IR versions before 3 did not always set `type`: tell it from the field that is set.
            if a.f.is_some() {
                AttributeType::Float
            } else if a.i.is_some() {
                AttributeType::Int
            } else if a.s.is_some() {
                AttributeType::String
            } else if a.t.is_some() {
                AttributeType::Tensor
            } else if !a.floats.is_empty() {
                AttributeType::Floats
            } else if !a.ints.is_empty() {
                AttributeType::Ints
            } else {
                AttributeType::Undefined
            }
        }
        k => k,
    }
}

fn kind_name(k: AttributeType) -> &'static str {
    match k {
        AttributeType::Float => "a float",
        AttributeType::Int => "an int",
        AttributeType::String => "a string",
        AttributeType::Tensor => "a tensor",
        AttributeType::Floats => "a list of floats",
        AttributeType::Ints => "a list of ints",
        AttributeType::Strings => "a list of strings",
        AttributeType::Graph | AttributeType::Graphs => "a graph",
        _ => "an unsupported kind",
    }
}

impl<'a> Attrs<'a> {
    fn get(&self, name: &str, want: AttributeType) -> Result<Option<&'a AttributeProto>, AttrError> {
        let Some(a) = self.0.attribute.iter().find(|a| a.name() == name) else { return Ok(None) };
        let found = kind(a);
        if found != want {
            return Err(AttrError::new(name, format!("expected {}, found {}", kind_name(want), kind_name(found))));
        }
        Ok(Some(a))
    }

    /// True if the node has the attribute, whatever its type.
    pub(crate) fn has(&self, name: &str) -> bool {
        self.0.attribute.iter().any(|a| a.name() == name)
    }

    pub(crate) fn int(&self, name: &str) -> Result<Option<i64>, AttrError> {
        Ok(self.get(name, AttributeType::Int)?.map(|a| a.i()))
    }

    pub(crate) fn int_or(&self, name: &str, default: i64) -> Result<i64, AttrError> {
        Ok(self.int(name)?.unwrap_or(default))
    }

    pub(crate) fn bool_or(&self, name: &str, default: bool) -> Result<bool, AttrError> {
        match self.int(name)? {
            None => Ok(default),
            Some(0) => Ok(false),
            Some(1) => Ok(true),
            Some(v) => Err(AttrError::new(name, format!("must be 0 or 1, found {v}"))),
        }
    }

    /// A non-negative int that fits a `usize`.
    pub(crate) fn count_or(&self, name: &str, default: usize) -> Result<usize, AttrError> {
        match self.int(name)? {
            None => Ok(default),
            Some(v) => usize::try_from(v).map_err(|_| AttrError::new(name, format!("must not be negative, found {v}"))),
        }
    }

    pub(crate) fn float_or(&self, name: &str, default: f32) -> Result<f32, AttrError> {
        Ok(self.get(name, AttributeType::Float)?.map_or(default, |a| a.f()))
    }

    pub(crate) fn ints(&self, name: &str) -> Result<Option<Vec<i64>>, AttrError> {
        Ok(self.get(name, AttributeType::Ints)?.map(|a| a.ints.clone()))
    }

    /// A list of non-negative ints; empty when absent.
    pub(crate) fn counts(&self, name: &str) -> Result<Vec<usize>, AttrError> {
        self.ints(name)?
            .unwrap_or_default()
            .into_iter()
            .map(|v| usize::try_from(v).map_err(|_| AttrError::new(name, format!("must not be negative, found {v}"))))
            .collect()
    }

    pub(crate) fn floats(&self, name: &str) -> Result<Option<Vec<f32>>, AttrError> {
        Ok(self.get(name, AttributeType::Floats)?.map(|a| a.floats.clone()))
    }

    pub(crate) fn string(&self, name: &str) -> Result<Option<String>, AttrError> {
        match self.get(name, AttributeType::String)? {
            None => Ok(None),
            Some(a) => {
                String::from_utf8(a.s().to_vec()).map(Some).map_err(|_| AttrError::new(name, "is not valid UTF-8"))
            }
        }
    }

    pub(crate) fn strings(&self, name: &str) -> Result<Option<Vec<String>>, AttrError> {
        match self.get(name, AttributeType::Strings)? {
            None => Ok(None),
            Some(a) => a
                .strings
                .iter()
                .map(|s| {
                    String::from_utf8(s.clone()).map_err(|_| AttrError::new(name, "holds a string that is not UTF-8"))
                })
                .collect::<Result<Vec<_>, _>>()
                .map(Some),
        }
    }

    pub(crate) fn tensor(&self, name: &str) -> Result<Option<Tensor<'static>>, AttrError> {
        match self.get(name, AttributeType::Tensor)? {
            None => Ok(None),
            Some(a) => match &a.t {
                Some(t) => super::tensor::decode(t, None).map(Some).map_err(|m| AttrError::new(name, m.to_string())),
                None => Err(AttrError::new(name, "has no tensor")),
            },
        }
    }
}
