//! Register-map files: a Modbus device described by data, not by code.
//!
//! A map file (TOML) lists a device's points: for each, its name, unit, register table, address,
//! type, word order, scale and offset, sentinels, whether it may be written, and its limits. This
//! module parses and validates such a file ([`RegisterMap::from_toml_str`]), plans coalesced reads
//! ([`RegisterMap::read_plan`]), and converts between engineering values and register words
//! ([`decode`], [`encode`], and the device-side [`encode_reading`]). It does no IO: callers pass
//! the file's text and the words they read. A new vendor is a new file; the project's own maps live
//! in `maps/` at the workspace root.
//!
//! # File format
//!
//! ```toml
//! [device]
//! name = "coolplane simulated CDU"
//! model = "coolplane-cdu-1"
//! max_read_registers = 32      # registers per read request (default 125, the protocol's limit)
//! max_write_registers = 30     # registers per write request (default 123)
//! max_read_bits = 2000         # coils / discrete inputs per read request (default 2000)
//! address_base = 0             # see "Addresses" below
//! default_word_order = "high-first"  # or "low-first" (word-swapped, "sw"); default "high-first"
//!
//! [[point]]
//! name = "supply_temp_c"       # identifier (letters, digits, `_`), unique in the file
//! description = "Secondary supply temperature"
//! unit = "°C"
//! table = "input"              # input | holding | coil | discrete
//! address = 0
//! type = "i16"                 # u16 | i16 | u32 | i32 | f32 | f64 | bool
//! scale = 0.1                  # engineering = raw * scale + offset (default 1)
//! offset = 0.0                 # (default 0)
//! sentinels = [0x7FFF, 0x8000] # raw values meaning "no value"
//! writable = false             # (default false)
//! min = 5.0                    # engineering limits (optional)
//! max = 60.0
//!
//! [[point]]
//! name = "supply_temp_f32_c"
//! table = "input"
//! address = 100
//! type = "f32"
//! word_order = "low-first"     # per point, overrides default_word_order
//!
//! [[point]]
//! name = "alarm_leak"
//! table = "input"
//! address = 10
//! type = "bool"
//! bit = 2                      # bit 2 (value 4) of the u16 at input register 10
//! ```
//!
//! Unknown keys are refused (a misspelt key is an error, not a silently ignored line).
//!
//! ## Addresses
//!
//! `address` minus `address_base` is the protocol (PDU, 0-based) address sent on the wire.
//! With `address_base = 0` the file holds protocol addresses; `mbpoll` counts from 1 by
//! default, so its `-r` is the protocol address + 1 (or pass `-0`). A vendor manual in
//! "40001" numbering can be copied verbatim with `address_base = 40001`; a manual that numbers
//! each table differently (00001 coils, 10001 discrete inputs, 30001 input registers, 40001
//! holding registers) uses a per-table base:
//! `address_base = { coil = 1, discrete = 10001, input = 30001, holding = 40001 }` (tables left
//! out have base 0). Every point must land in 0..=65535, all of its registers included.
//!
//! ## Types, word order, scale
//!
//! - `u16`/`i16`: one register. `u32`/`i32`/`f32` (IEEE-754 single): two registers. `f64`: four.
//!   Bytes within a register are big-endian, as the protocol defines.
//! - Word order of 32/64-bit values: `high-first` (the most significant word at the lower
//!   address, "big-endian words") or `low-first` (word-swapped, vendors' "32 bit float (sw)"; for
//!   `f64` all four words reversed). `mbpoll` reads low-first by default and high-first with `-B`.
//! - `bool`: in a coil or discrete-input table, one bit (0/1). In an input or holding table it is
//!   one bit of a 16-bit register, selected by `bit = 0..=15` (bit 0 = value 1). Several bit
//!   points may share a register, alongside a `u16` point that reads the whole word (an alarm
//!   word and its bits). A bit of a register cannot be writable: writing it would overwrite its
//!   neighbours. Booleans have no scale or offset and decode to 0.0 / 1.0.
//! - Engineering value = raw × `scale` + `offset`, for floats as well. `scale` must be finite
//!   and non-zero.
//!
//! ## Sentinels
//!
//! Raw values meaning "no value" (typically `0x7FFF`, `0x8000` on `i16`, `0xFFFF` on `u16`),
//! compared with the raw unsigned word, or for 32-bit points the raw unsigned 32-bit value in
//! its natural order (after undoing the word order). A negative number is taken as the
//! two's-complement pattern (`-32768` = `0x8000` on a 16-bit point). For a bit point the
//! sentinel is compared with the whole register. Sentinels are not supported on `f64` points nor
//! on coils and discrete inputs. A float point may list a NaN pattern (`0x7FC00000`, the quiet
//! NaN) as its sentinel; any other NaN or infinity decodes as [`Decoded::Invalid`].
//!
//! ## Limits and writes
//!
//! Only holding registers and coils may be `writable`, and a writable point may not need more
//! registers than `max_write_registers`. [`encode`] refuses a value outside `min`/`max`, outside
//! what the register type can represent at this scale, or that would encode to a sentinel; its
//! error names the point and the limit. On read-only points `min`/`max` are informational: [`decode`]
//! reports what the device sent, and plausibility is the caller's decision.
//!
//! ## Validation
//!
//! [`RegisterMap::from_toml_str`] refuses, naming the file, the point and the field: a missing or
//! malformed name, a duplicate name, registers of two points overlapping in a table (apart from
//! bit points sharing a 16-bit register), a type the table cannot hold (coils and discrete inputs
//! hold only `bool`), an unknown table, type or word order, an address outside 0..=65535 (after the
//! base, all registers of the point included), a point wider than a read request, `writable` on an
//! input register, discrete input or register bit, `min > max`, a non-finite or zero scale, and a
//! sentinel that does not fit the point's width.
//!
//! # Example
//!
//! ```
//! use coolplane_adapters::regmap::{decode, encode, Decoded, RegisterMap, Table};
//!
//! let text = r#"
//! [device]
//! name = "demo"
//! max_read_registers = 32
//!
//! [[point]]
//! name = "supply_temp_c"
//! table = "input"
//! address = 0
//! type = "i16"
//! scale = 0.1
//! sentinels = [0x7FFF, 0x8000]
//!
//! [[point]]
//! name = "flow_lpm"
//! table = "input"
//! address = 1
//! type = "u16"
//! scale = 0.1
//!
//! [[point]]
//! name = "supply_setpoint_c"
//! table = "holding"
//! address = 0
//! type = "i16"
//! scale = 0.1
//! writable = true
//! min = 5
//! max = 60
//! "#;
//! let map = RegisterMap::from_toml_str("demo.toml", text).unwrap();
//! let plan = map.read_plan(4);
//! assert_eq!(plan.len(), 2); // one input block (0..=1), one holding block
//! assert_eq!((plan[0].table, plan[0].start, plan[0].count), (Table::Input, 0, 2));
//!
//! let values = map.decode_block(&plan[0], &[0x7FFF, 1234]);
//! assert_eq!(values[0], (0, Decoded::Sentinel));
//! assert_eq!(values[1], (1, Decoded::Value(123.4)));
//!
//! let sp = map.point("supply_setpoint_c").unwrap();
//! assert_eq!(encode(sp, 18.5).unwrap(), vec![185]);
//! assert!(encode(sp, 70.0).is_err()); // above max = 60
//! assert_eq!(decode(sp, &[185]), Decoded::Value(18.5));
//! ```

use std::fmt;

use serde::{Deserialize, Serialize};

/// A Modbus data table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Table {
    /// Coils: read/write bits (function codes 1, 5, 15).
    Coil,
    /// Discrete inputs: read-only bits (function code 2).
    Discrete,
    /// Input registers: read-only 16-bit words (function code 4).
    Input,
    /// Holding registers: read/write 16-bit words (function codes 3, 6, 16).
    Holding,
}

impl Table {
    /// The four tables, in the order [`RegisterMap::read_plan`] lists its blocks.
    pub const ALL: [Table; 4] = [Table::Coil, Table::Discrete, Table::Input, Table::Holding];

    /// The table's name in map files.
    pub fn as_str(self) -> &'static str {
        match self {
            Table::Coil => "coil",
            Table::Discrete => "discrete",
            Table::Input => "input",
            Table::Holding => "holding",
        }
    }

    /// Parses a table name as written in map files.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.as_str() == name)
    }

    /// True for the bit tables (coils and discrete inputs), false for the register tables.
    pub fn is_bits(self) -> bool {
        matches!(self, Table::Coil | Table::Discrete)
    }

    /// The table in words, for messages ("the input-register table").
    pub fn describe(self) -> &'static str {
        match self {
            Table::Coil => "the coil table",
            Table::Discrete => "the discrete-input table",
            Table::Input => "the input-register table",
            Table::Holding => "the holding-register table",
        }
    }
}

impl fmt::Display for Table {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How a point's raw value is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ValueType {
    /// Unsigned 16-bit integer, one register.
    U16,
    /// Signed (two's complement) 16-bit integer, one register.
    I16,
    /// Unsigned 32-bit integer, two registers.
    U32,
    /// Signed 32-bit integer, two registers.
    I32,
    /// IEEE-754 single precision, two registers.
    F32,
    /// IEEE-754 double precision, four registers.
    F64,
    /// A coil or discrete input, or one bit of a 16-bit register.
    Bool,
}

impl ValueType {
    const ALL: [ValueType; 7] = [
        ValueType::U16,
        ValueType::I16,
        ValueType::U32,
        ValueType::I32,
        ValueType::F32,
        ValueType::F64,
        ValueType::Bool,
    ];

    /// The type's name in map files.
    pub fn as_str(self) -> &'static str {
        match self {
            ValueType::U16 => "u16",
            ValueType::I16 => "i16",
            ValueType::U32 => "u32",
            ValueType::I32 => "i32",
            ValueType::F32 => "f32",
            ValueType::F64 => "f64",
            ValueType::Bool => "bool",
        }
    }

    /// Parses a type name as written in map files.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.as_str() == name)
    }

    /// Registers (or bits, for a `bool` in a bit table) a value of this type occupies.
    pub fn width(self) -> u16 {
        match self {
            ValueType::U16 | ValueType::I16 | ValueType::Bool => 1,
            ValueType::U32 | ValueType::I32 | ValueType::F32 => 2,
            ValueType::F64 => 4,
        }
    }

    /// True for `f32` and `f64`.
    pub fn is_float(self) -> bool {
        matches!(self, ValueType::F32 | ValueType::F64)
    }

    /// The raw integer range of the integer types (`None` for floats and `bool`).
    fn int_range(self) -> Option<(f64, f64)> {
        match self {
            ValueType::U16 => Some((0.0, f64::from(u16::MAX))),
            ValueType::I16 => Some((f64::from(i16::MIN), f64::from(i16::MAX))),
            ValueType::U32 => Some((0.0, f64::from(u32::MAX))),
            ValueType::I32 => Some((f64::from(i32::MIN), f64::from(i32::MAX))),
            ValueType::F32 | ValueType::F64 | ValueType::Bool => None,
        }
    }
}

impl fmt::Display for ValueType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Order of the 16-bit words of a 32- or 64-bit value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WordOrder {
    /// Most significant word first, at the lowest address ("big-endian words").
    #[default]
    HighFirst,
    /// Least significant word first (word-swapped, "sw"; `f64`: all four words reversed).
    LowFirst,
}

impl WordOrder {
    /// The order's name in map files.
    pub fn as_str(self) -> &'static str {
        match self {
            WordOrder::HighFirst => "high-first",
            WordOrder::LowFirst => "low-first",
        }
    }

    /// Parses a word-order name as written in map files.
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "high-first" => Some(WordOrder::HighFirst),
            "low-first" => Some(WordOrder::LowFirst),
            _ => None,
        }
    }
}

impl fmt::Display for WordOrder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One named value of a device.
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    /// Identifier, unique within its map.
    pub name: String,
    /// Register table.
    pub table: Table,
    /// Protocol (0-based) address of its first register or bit.
    pub address: u16,
    /// How the raw value is stored.
    pub value_type: ValueType,
    /// For a `bool` in an input or holding register: which bit (0 = least significant).
    pub bit: Option<u8>,
    /// Engineering value = raw × scale + offset. Finite, non-zero.
    pub scale: f64,
    /// See `scale`.
    pub offset: f64,
    /// Raw values meaning "no value" (unsigned; the 16-bit word or the 32-bit value).
    pub sentinels: Vec<u32>,
    /// Word order of 32/64-bit values (the device default unless the point overrides it).
    pub word_order: WordOrder,
    /// Whether the supervisor may write it (holding registers and coils only).
    pub writable: bool,
    /// Lower engineering limit (writes below it are refused).
    pub min: Option<f64>,
    /// Upper engineering limit (writes above it are refused).
    pub max: Option<f64>,
    /// Engineering unit, free text (may be empty).
    pub unit: String,
    /// Description, free text (may be empty).
    pub description: String,
}

impl Point {
    /// Registers (or bits, in a coil or discrete-input table) the point occupies.
    pub fn width(&self) -> u16 {
        self.value_type.width()
    }

    /// True for a bit of a 16-bit register (`bool` with `bit = n`).
    pub fn is_register_bit(&self) -> bool {
        self.bit.is_some() && !self.table.is_bits()
    }

    /// The address one past the point's last register, as a `u32` (never overflows).
    pub fn end(&self) -> u32 {
        u32::from(self.address) + u32::from(self.width())
    }

    /// Whether `value` lies within the point's `min`/`max` (limits that are absent pass).
    pub fn within_limits(&self, value: f64) -> bool {
        self.min.is_none_or(|m| value >= m) && self.max.is_none_or(|m| value <= m)
    }

    /// The engineering range the register type can hold at this scale and offset (sentinels
    /// included), low end first. `bool`: 0 to 1.
    pub fn representable_range(&self) -> (f64, f64) {
        let (lo, hi) = match self.value_type {
            ValueType::Bool => return (0.0, 1.0),
            ValueType::F32 => (-f64::from(f32::MAX), f64::from(f32::MAX)),
            ValueType::F64 => (f64::MIN, f64::MAX),
            t => t.int_range().unwrap_or((0.0, 0.0)),
        };
        let a = scaled(self, lo);
        let b = scaled(self, hi);
        (a.min(b), a.max(b))
    }

    fn is_sentinel(&self, raw: u32) -> bool {
        self.sentinels.contains(&raw)
    }
}

/// Per-table address bases: `address` in the file minus the base is the protocol address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AddressBase {
    /// Base of coil addresses.
    pub coil: u32,
    /// Base of discrete-input addresses.
    pub discrete: u32,
    /// Base of input-register addresses.
    pub input: u32,
    /// Base of holding-register addresses.
    pub holding: u32,
}

impl AddressBase {
    /// The base of `table`.
    pub fn for_table(&self, table: Table) -> u32 {
        match table {
            Table::Coil => self.coil,
            Table::Discrete => self.discrete,
            Table::Input => self.input,
            Table::Holding => self.holding,
        }
    }
}

/// A device's validated register map.
#[derive(Debug, Clone, PartialEq)]
pub struct RegisterMap {
    /// Device name (free text).
    pub name: String,
    /// Device model (free text, may be empty).
    pub model: String,
    /// Most registers one read request may ask for (1..=125).
    pub max_read_registers: u16,
    /// Most registers one write request may carry (1..=123).
    pub max_write_registers: u16,
    /// Most coils or discrete inputs one read request may ask for (1..=2000).
    pub max_read_bits: u16,
    /// Address bases of the file's numbering (for showing addresses the way the file does).
    pub address_base: AddressBase,
    /// Word order of points that do not give their own.
    pub default_word_order: WordOrder,
    /// The points, in file order (indices are those [`RegisterMap::decode_block`] returns).
    pub points: Vec<Point>,
}

/// One read request: `count` registers (or bits) of `table` from `start`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ReadBlock {
    /// Table to read.
    pub table: Table,
    /// First protocol address.
    pub start: u16,
    /// Registers (or bits) to read.
    pub count: u16,
}

impl ReadBlock {
    /// Whether the block holds all of `point`'s registers.
    pub fn covers(&self, point: &Point) -> bool {
        let start = u32::from(self.start);
        point.table == self.table && u32::from(point.address) >= start && point.end() <= start + u32::from(self.count)
    }
}

/// What a point's raw words mean.
#[derive(Debug, Clone, PartialEq)]
pub enum Decoded {
    /// Engineering value.
    Value(f64),
    /// The raw value is one of the point's sentinels: the device has no value.
    Sentinel,
    /// The words are not a usable value (NaN or infinite float, wrong number of words); the
    /// text says why.
    Invalid(String),
}

impl Decoded {
    /// The engineering value, if there is one.
    pub fn value(&self) -> Option<f64> {
        match self {
            Decoded::Value(v) => Some(*v),
            Decoded::Sentinel | Decoded::Invalid(_) => None,
        }
    }
}

/// A map file that could not be used.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum MapError {
    /// Not valid TOML, a value of the wrong TOML type, or an unknown key (the message gives the
    /// line).
    #[error("{file}: {message}")]
    Parse {
        /// File name, as the caller gave it.
        file: String,
        /// The parser's message.
        message: String,
    },
    /// A `[device]` setting is missing or invalid.
    #[error("{file}: [device] field `{field}`: {message}")]
    Device {
        /// File name, as the caller gave it.
        file: String,
        /// Key in `[device]`.
        field: String,
        /// What is wrong.
        message: String,
    },
    /// A point is invalid.
    #[error("{file}: point `{point}`, field `{field}`: {message}")]
    Invalid {
        /// File name, as the caller gave it.
        file: String,
        /// The point's name (`#n` for the n-th `[[point]]`, from 1, when it has no usable name).
        point: String,
        /// Key of the point.
        field: String,
        /// What is wrong.
        message: String,
    },
}

/// Which limit a refused value broke.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// The point's `min`/`max` in the map file.
    Map,
    /// What the register type can hold at the point's scale and offset.
    Register(ValueType),
}

impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Limit::Map => f.write_str("the map's min/max"),
            Limit::Register(t) => write!(f, "the range of its {t} register at this scale"),
        }
    }
}

/// A value that could not be encoded for writing.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum EncodeError {
    /// Outside `min`..=`max` of `limit`.
    #[error("`{point}`: {value} is outside {limit}, [{min}, {max}]")]
    OutOfRange {
        /// Point name.
        point: String,
        /// The refused value.
        value: f64,
        /// Lower end of the broken limit (`-inf` when only `max` is set).
        min: f64,
        /// Upper end of the broken limit (`inf` when only `min` is set).
        max: f64,
        /// Which limit.
        limit: Limit,
    },
    /// The map does not mark the point writable.
    #[error("`{point}` is not writable")]
    NotWritable {
        /// Point name.
        point: String,
    },
    /// NaN or infinite value.
    #[error("`{point}`: the value is not a finite number")]
    NotFinite {
        /// Point name.
        point: String,
    },
    /// The value would encode to a raw value the map declares a sentinel ("no value").
    #[error("`{point}`: {value} encodes to raw {raw:#x}, one of its sentinels (no value)")]
    Sentinel {
        /// Point name.
        point: String,
        /// The refused value.
        value: f64,
        /// The raw value it would have been.
        raw: u32,
    },
}

// ---------------------------------------------------------------------------------------------
// Parsing and validation.

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    device: Option<RawDevice>,
    #[serde(default)]
    point: Vec<RawPoint>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDevice {
    name: Option<String>,
    model: Option<String>,
    max_read_registers: Option<i64>,
    max_write_registers: Option<i64>,
    max_read_bits: Option<i64>,
    address_base: Option<toml::Value>,
    default_word_order: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPoint {
    name: Option<String>,
    description: Option<String>,
    unit: Option<String>,
    table: Option<String>,
    address: Option<i64>,
    #[serde(rename = "type")]
    value_type: Option<String>,
    bit: Option<i64>,
    scale: Option<f64>,
    offset: Option<f64>,
    sentinels: Option<Vec<i64>>,
    word_order: Option<String>,
    writable: Option<bool>,
    min: Option<f64>,
    max: Option<f64>,
}

/// Builds errors that name the file (and the point).
struct Ctx<'a> {
    file: &'a str,
}

impl Ctx<'_> {
    fn device(&self, field: &str, message: impl Into<String>) -> MapError {
        MapError::Device {
            file: self.file.to_string(),
            field: field.to_string(),
            message: message.into(),
        }
    }

    fn point(&self, point: &str, field: &str, message: impl Into<String>) -> MapError {
        MapError::Invalid {
            file: self.file.to_string(),
            point: point.to_string(),
            field: field.to_string(),
            message: message.into(),
        }
    }
}

fn is_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    match chars.next() {
        Some(c) if c.is_ascii_alphabetic() || c == '_' => chars.all(|c| c.is_ascii_alphanumeric() || c == '_'),
        _ => false,
    }
}

fn device_limit(ctx: &Ctx<'_>, field: &str, value: Option<i64>, max: u16) -> Result<u16, MapError> {
    match value {
        None => Ok(max),
        Some(v) => match u16::try_from(v) {
            Ok(v) if (1..=max).contains(&v) => Ok(v),
            _ => Err(ctx.device(field, format!("{v} is not in 1..={max}"))),
        },
    }
}

fn parse_address_base(ctx: &Ctx<'_>, value: Option<&toml::Value>) -> Result<AddressBase, MapError> {
    let one = |field: &str, v: &toml::Value| -> Result<u32, MapError> {
        match v.as_integer().map(u32::try_from) {
            Some(Ok(b)) => Ok(b),
            _ => Err(ctx.device(field, format!("expected a non-negative integer, found {v}"))),
        }
    };
    match value {
        None => Ok(AddressBase::default()),
        Some(toml::Value::Table(t)) => {
            let mut base = AddressBase::default();
            for (key, v) in t {
                let field = format!("address_base.{key}");
                let b = one(&field, v)?;
                match Table::from_name(key) {
                    Some(Table::Coil) => base.coil = b,
                    Some(Table::Discrete) => base.discrete = b,
                    Some(Table::Input) => base.input = b,
                    Some(Table::Holding) => base.holding = b,
                    None => return Err(ctx.device(&field, "unknown table (coil, discrete, input, holding)")),
                }
            }
            Ok(base)
        }
        Some(v) => {
            let b = one("address_base", v)?;
            Ok(AddressBase {
                coil: b,
                discrete: b,
                input: b,
                holding: b,
            })
        }
    }
}

/// Converts a sentinel as written (unsigned or two's-complement negative) to the raw unsigned
/// value of a `bits`-wide point.
fn sentinel_raw(value: i64, bits: u32) -> Option<u32> {
    let modulus = 1i64 << bits;
    if (-(modulus / 2)..modulus).contains(&value) {
        u32::try_from(value.rem_euclid(modulus)).ok()
    } else {
        None
    }
}

/// The `[device]` settings points are checked against.
struct DeviceSettings {
    base: AddressBase,
    default_order: WordOrder,
    max_read_registers: u16,
    max_read_bits: u16,
    max_write_registers: u16,
}

fn parse_point(ctx: &Ctx<'_>, index: usize, raw: RawPoint, dev: &DeviceSettings) -> Result<Point, MapError> {
    let DeviceSettings {
        base,
        default_order,
        max_read_registers,
        max_read_bits,
        max_write_registers,
    } = *dev;
    let name = match raw.name {
        Some(n) if is_identifier(&n) => n,
        Some(n) => {
            return Err(ctx.point(
                &format!("#{}", index + 1),
                "name",
                format!("`{n}` is not an identifier (a letter or `_`, then letters, digits, `_`)"),
            ))
        }
        None => return Err(ctx.point(&format!("#{}", index + 1), "name", "missing")),
    };
    let err = |field: &str, message: String| ctx.point(&name, field, message);

    let table = match raw.table.as_deref() {
        None => return Err(err("table", "missing (input, holding, coil or discrete)".into())),
        Some(t) => Table::from_name(t)
            .ok_or_else(|| err("table", format!("unknown table `{t}` (input, holding, coil, discrete)")))?,
    };
    let value_type = match raw.value_type.as_deref() {
        None => return Err(err("type", "missing (u16, i16, u32, i32, f32, f64 or bool)".into())),
        Some(t) => ValueType::from_name(t).ok_or_else(|| {
            err(
                "type",
                format!("unknown type `{t}` (u16, i16, u32, i32, f32, f64, bool)"),
            )
        })?,
    };
    if table.is_bits() && value_type != ValueType::Bool {
        return Err(err(
            "type",
            format!(
                "{} holds single bits: only `bool`, not `{value_type}`",
                table.describe()
            ),
        ));
    }
    let width = value_type.width();

    // Bit of a register.
    let bit = match raw.bit {
        None => None,
        Some(_) if value_type != ValueType::Bool || table.is_bits() => {
            return Err(err(
                "bit",
                format!(
                    "`bit` is only for a `bool` in an input or holding register, not for `{value_type}` in {}",
                    table.describe()
                ),
            ))
        }
        Some(b) => match u8::try_from(b) {
            Ok(b) if b < 16 => Some(b),
            _ => return Err(err("bit", format!("{b} is not in 0..=15"))),
        },
    };
    if value_type == ValueType::Bool && !table.is_bits() && bit.is_none() {
        return Err(err(
            "bit",
            format!(
                "a `bool` in {} needs `bit = 0..=15` (or use `u16` for a 0/1 word)",
                table.describe()
            ),
        ));
    }

    // Address.
    let table_base = base.for_table(table);
    let address = match raw.address {
        None => return Err(err("address", "missing".into())),
        Some(a) => {
            let protocol = a.saturating_sub(i64::from(table_base));
            let last = protocol.saturating_add(i64::from(width) - 1);
            if protocol < 0 {
                return Err(err(
                    "address",
                    format!("{a} is below the address base {table_base} of {}", table.describe()),
                ));
            }
            if last > i64::from(u16::MAX) {
                let shown = if table_base == 0 {
                    format!("{a}")
                } else {
                    format!("{a} (protocol address {protocol})")
                };
                return Err(err(
                    "address",
                    format!(
                        "{shown} with {width} register(s) runs past 65535 in {}",
                        table.describe()
                    ),
                ));
            }
            u16::try_from(protocol).map_err(|_| err("address", format!("{a} is out of range")))?
        }
    };
    let read_limit = if table.is_bits() {
        max_read_bits
    } else {
        max_read_registers
    };
    if width > read_limit {
        return Err(err(
            "type",
            format!("`{value_type}` needs {width} registers but the device reads at most {read_limit} per request"),
        ));
    }

    // Scale and offset.
    let scale = raw.scale.unwrap_or(1.0);
    let offset = raw.offset.unwrap_or(0.0);
    if !scale.is_finite() || scale == 0.0 {
        return Err(err("scale", format!("{scale} is not a finite, non-zero number")));
    }
    if !offset.is_finite() {
        return Err(err("offset", format!("{offset} is not a finite number")));
    }
    if value_type == ValueType::Bool {
        if scale != 1.0 {
            return Err(err("scale", "a `bool` has no scale".into()));
        }
        if offset != 0.0 {
            return Err(err("offset", "a `bool` has no offset".into()));
        }
    }

    // Sentinels.
    let sentinel_bits = match (value_type, table.is_bits()) {
        (_, true) | (ValueType::F64, _) => None,
        (ValueType::U32 | ValueType::I32 | ValueType::F32, _) => Some(32),
        _ => Some(16),
    };
    let mut sentinels = Vec::new();
    for &s in raw.sentinels.as_deref().unwrap_or(&[]) {
        let bits = sentinel_bits.ok_or_else(|| {
            err(
                "sentinels",
                format!("sentinels are not supported for `{value_type}` in {}", table.describe()),
            )
        })?;
        let r =
            sentinel_raw(s, bits).ok_or_else(|| err("sentinels", format!("{s} does not fit a {bits}-bit value")))?;
        if !sentinels.contains(&r) {
            sentinels.push(r);
        }
    }

    // Word order.
    let word_order = match raw.word_order.as_deref() {
        None => default_order,
        Some(_) if width < 2 => {
            return Err(err(
                "word_order",
                format!("word order only applies to 32/64-bit types, not `{value_type}`"),
            ))
        }
        Some(o) => WordOrder::from_name(o).ok_or_else(|| {
            err(
                "word_order",
                format!("unknown word order `{o}` (high-first, low-first)"),
            )
        })?,
    };

    // Writable.
    let writable = raw.writable.unwrap_or(false);
    if writable {
        if !matches!(table, Table::Holding | Table::Coil) {
            return Err(err(
                "writable",
                format!(
                    "{} is read-only (only holding registers and coils can be writable)",
                    table.describe()
                ),
            ));
        }
        if bit.is_some() {
            return Err(err(
                "writable",
                "a bit of a register cannot be written alone (it would overwrite its neighbours); make the whole word writable".into(),
            ));
        }
        if !table.is_bits() && width > max_write_registers {
            return Err(err(
                "writable",
                format!("`{value_type}` needs {width} registers but the device writes at most {max_write_registers} per request"),
            ));
        }
    }

    // Limits.
    for (field, v) in [("min", raw.min), ("max", raw.max)] {
        if let Some(v) = v {
            if !v.is_finite() {
                return Err(err(field, format!("{v} is not a finite number")));
            }
        }
    }
    if let (Some(lo), Some(hi)) = (raw.min, raw.max) {
        if lo > hi {
            return Err(err("min", format!("min {lo} is greater than max {hi}")));
        }
    }

    Ok(Point {
        name,
        table,
        address,
        value_type,
        bit,
        scale,
        offset,
        sentinels,
        word_order,
        writable,
        min: raw.min,
        max: raw.max,
        unit: raw.unit.unwrap_or_default(),
        description: raw.description.unwrap_or_default(),
    })
}

/// Two points may share registers only when both are one register at the same address, at least
/// one is a bit of it, the other is a bit or a `u16`, and two bits differ.
fn may_share(a: &Point, b: &Point) -> bool {
    let word_like = |p: &Point| p.is_register_bit() || p.value_type == ValueType::U16;
    !a.table.is_bits()
        && a.address == b.address
        && a.width() == 1
        && b.width() == 1
        && word_like(a)
        && word_like(b)
        && (a.is_register_bit() || b.is_register_bit())
        && !(a.is_register_bit() && b.is_register_bit() && a.bit == b.bit)
}

impl RegisterMap {
    /// Parses and validates a map file. `file` only names the file in errors.
    pub fn from_toml_str(file: &str, text: &str) -> Result<Self, MapError> {
        let ctx = Ctx { file };
        let raw: RawFile = toml::from_str(text).map_err(|e| MapError::Parse {
            file: file.to_string(),
            message: e.to_string(),
        })?;
        let device = raw
            .device
            .ok_or_else(|| ctx.device("device", "missing [device] section"))?;
        let name = match device.name {
            Some(n) if !n.trim().is_empty() => n,
            _ => return Err(ctx.device("name", "missing or empty")),
        };
        let max_read_registers = device_limit(&ctx, "max_read_registers", device.max_read_registers, 125)?;
        let max_write_registers = device_limit(&ctx, "max_write_registers", device.max_write_registers, 123)?;
        let max_read_bits = device_limit(&ctx, "max_read_bits", device.max_read_bits, 2000)?;
        let address_base = parse_address_base(&ctx, device.address_base.as_ref())?;
        let default_word_order = match device.default_word_order.as_deref() {
            None => WordOrder::HighFirst,
            Some(o) => WordOrder::from_name(o).ok_or_else(|| {
                ctx.device(
                    "default_word_order",
                    format!("unknown word order `{o}` (high-first, low-first)"),
                )
            })?,
        };
        if raw.point.is_empty() {
            return Err(ctx.device("point", "the map defines no [[point]]"));
        }

        let settings = DeviceSettings {
            base: address_base,
            default_order: default_word_order,
            max_read_registers,
            max_read_bits,
            max_write_registers,
        };
        let mut points: Vec<Point> = Vec::with_capacity(raw.point.len());
        // Names seen so far, for duplicates in linear time (a map may list tens of thousands).
        let mut seen: std::collections::HashMap<String, usize> =
            std::collections::HashMap::with_capacity(raw.point.len());
        for (i, rp) in raw.point.into_iter().enumerate() {
            let p = parse_point(&ctx, i, rp, &settings)?;
            if let Some(prev) = seen.get(&p.name) {
                return Err(ctx.point(&p.name, "name", format!("duplicate name (also point #{})", prev + 1)));
            }
            seen.insert(p.name.clone(), points.len());
            points.push(p);
        }

        // Overlaps, per table: sweep the points in address order.
        let mut order: Vec<usize> = (0..points.len()).collect();
        order.sort_by_key(|&i| (points[i].table, points[i].address, i));
        for (k, &i) in order.iter().enumerate() {
            let a = &points[i];
            for &j in &order[k + 1..] {
                let b = &points[j];
                if b.table != a.table || u32::from(b.address) >= a.end() {
                    break;
                }
                if !may_share(a, b) {
                    let later = if i > j { a } else { b };
                    let other = if i > j { b } else { a };
                    let unit = if a.table.is_bits() { "bits" } else { "registers" };
                    return Err(ctx.point(
                        &later.name,
                        "address",
                        format!(
                            "{} {unit} {}..={} overlap point `{}` ({}..={})",
                            later.table,
                            later.address,
                            later.end() - 1,
                            other.name,
                            other.address,
                            other.end() - 1
                        ),
                    ));
                }
            }
        }

        Ok(RegisterMap {
            name,
            model: device.model.unwrap_or_default(),
            max_read_registers,
            max_write_registers,
            max_read_bits,
            address_base,
            default_word_order,
            points,
        })
    }

    /// The point called `name`.
    pub fn point(&self, name: &str) -> Option<&Point> {
        self.points.iter().find(|p| p.name == name)
    }

    /// The index (in [`RegisterMap::points`]) of the point called `name`.
    pub fn point_index(&self, name: &str) -> Option<usize> {
        self.points.iter().position(|p| p.name == name)
    }

    /// The points of `table` with their indices, in file order.
    pub fn points_in(&self, table: Table) -> impl Iterator<Item = (usize, &Point)> + '_ {
        self.points.iter().enumerate().filter(move |(_, p)| p.table == table)
    }

    /// The address of `point` in the file's own numbering (protocol address + the table's base).
    pub fn file_address(&self, point: &Point) -> u32 {
        u32::from(point.address) + self.address_base.for_table(point.table)
    }

    /// Coalesced read requests covering every point exactly once.
    ///
    /// Per table (in [`Table::ALL`] order), points in address order are merged into one block
    /// while the block stays within `max_read_registers` (`max_read_bits` for coils and discrete
    /// inputs) and the unused registers between two points are at most `gap` (0: only adjacent
    /// points merge). Blocks never mix tables and never split a point. Reading a gap asks the
    /// device for registers the map does not list: use `gap = 0` for devices that answer such
    /// reads with an exception.
    pub fn read_plan(&self, gap: u16) -> Vec<ReadBlock> {
        let mut blocks = Vec::new();
        for table in Table::ALL {
            let limit = u32::from(if table.is_bits() {
                self.max_read_bits
            } else {
                self.max_read_registers
            });
            let mut spans: Vec<(u32, u32)> = self
                .points
                .iter()
                .filter(|p| p.table == table)
                .map(|p| (u32::from(p.address), p.end()))
                .collect();
            spans.sort_unstable();
            let mut current: Option<(u32, u32)> = None;
            for (start, end) in spans {
                current = match current {
                    Some((cs, ce)) if start <= ce + u32::from(gap) && end.max(ce) - cs <= limit => {
                        Some((cs, ce.max(end)))
                    }
                    Some(done) => {
                        blocks.push(block(table, done));
                        Some((start, end))
                    }
                    None => Some((start, end)),
                };
            }
            if let Some(done) = current {
                blocks.push(block(table, done));
            }
        }
        blocks
    }

    /// Decodes every point `block` holds entirely, from the words read (for coils and discrete
    /// inputs: one `u16` 0/1 per bit). Returns `(point index, value)` in point order. A reply
    /// shorter than the block gives [`Decoded::Invalid`] for the points it does not reach.
    pub fn decode_block(&self, block: &ReadBlock, words: &[u16]) -> Vec<(usize, Decoded)> {
        self.points
            .iter()
            .enumerate()
            .filter(|(_, p)| block.covers(p))
            .map(|(i, p)| {
                let from = usize::from(p.address - block.start);
                let to = from + usize::from(p.width());
                let d = match words.get(from..to) {
                    Some(w) => decode(p, w),
                    None => Decoded::Invalid(format!(
                        "`{}`: the reply has {} word(s) of the {} the block {} {}+{} asked for",
                        p.name,
                        words.len(),
                        block.count,
                        block.table,
                        block.start,
                        block.count
                    )),
                };
                (i, d)
            })
            .collect()
    }
}

fn block(table: Table, (start, end): (u32, u32)) -> ReadBlock {
    ReadBlock {
        table,
        start: u16::try_from(start).unwrap_or(u16::MAX),
        count: u16::try_from(end - start).unwrap_or(u16::MAX),
    }
}

// ---------------------------------------------------------------------------------------------
// Decoding and encoding.

/// A raw value before it is split into words.
#[derive(Debug, Clone, Copy)]
enum Raw {
    W16(u16),
    W32(u32),
    W64(u64),
}

impl Raw {
    fn words(self, order: WordOrder) -> Vec<u16> {
        let mut w = match self {
            Raw::W16(x) => return vec![x],
            Raw::W32(x) => vec![(x >> 16) as u16, x as u16],
            Raw::W64(x) => vec![(x >> 48) as u16, (x >> 32) as u16, (x >> 16) as u16, x as u16],
        };
        if order == WordOrder::LowFirst {
            w.reverse();
        }
        w
    }

    /// The value compared with sentinels (`None` for 64-bit values, which have none).
    fn sentinel_key(self) -> Option<u32> {
        match self {
            Raw::W16(x) => Some(u32::from(x)),
            Raw::W32(x) => Some(x),
            Raw::W64(_) => None,
        }
    }
}

fn join32(order: WordOrder, a: u16, b: u16) -> u32 {
    let (hi, lo) = match order {
        WordOrder::HighFirst => (a, b),
        WordOrder::LowFirst => (b, a),
    };
    (u32::from(hi) << 16) | u32::from(lo)
}

fn join64(order: WordOrder, w: [u16; 4]) -> u64 {
    let w = match order {
        WordOrder::HighFirst => w,
        WordOrder::LowFirst => [w[3], w[2], w[1], w[0]],
    };
    w.iter().fold(0u64, |acc, &x| (acc << 16) | u64::from(x))
}

/// Decodes a point from exactly [`Point::width`] words (for coils and discrete inputs: one `u16`,
/// 0 or non-zero). Sentinels give [`Decoded::Sentinel`]; NaN or infinite floats, a result that
/// overflows, or a wrong number of words give [`Decoded::Invalid`].
pub fn decode(point: &Point, words: &[u16]) -> Decoded {
    if words.len() != usize::from(point.width()) {
        return Decoded::Invalid(format!(
            "`{}` ({}) needs {} word(s), got {}",
            point.name,
            point.value_type,
            point.width(),
            words.len()
        ));
    }
    let order = point.word_order;
    let (raw, number): (Option<u32>, f64) = match (point.value_type, words) {
        (ValueType::Bool, &[w]) => {
            if point.table.is_bits() {
                return Decoded::Value(if w != 0 { 1.0 } else { 0.0 });
            }
            if point.is_sentinel(u32::from(w)) {
                return Decoded::Sentinel;
            }
            let set = match point.bit {
                Some(b) => (w >> (b & 15)) & 1 == 1,
                None => w != 0,
            };
            return Decoded::Value(if set { 1.0 } else { 0.0 });
        }
        (ValueType::U16, &[w]) => (Some(u32::from(w)), f64::from(w)),
        (ValueType::I16, &[w]) => (Some(u32::from(w)), f64::from(w as i16)),
        (ValueType::U32, &[a, b]) => {
            let r = join32(order, a, b);
            (Some(r), f64::from(r))
        }
        (ValueType::I32, &[a, b]) => {
            let r = join32(order, a, b);
            (Some(r), f64::from(r as i32))
        }
        (ValueType::F32, &[a, b]) => {
            let r = join32(order, a, b);
            (Some(r), f64::from(f32::from_bits(r)))
        }
        (ValueType::F64, &[a, b, c, d]) => (None, f64::from_bits(join64(order, [a, b, c, d]))),
        _ => return Decoded::Invalid(format!("`{}`: unexpected word count {}", point.name, words.len())),
    };
    if raw.is_some_and(|r| point.is_sentinel(r)) {
        return Decoded::Sentinel;
    }
    if !number.is_finite() {
        return Decoded::Invalid(format!(
            "`{}`: the device sent {number}, not a finite number",
            point.name
        ));
    }
    let value = scaled(point, number);
    if !value.is_finite() {
        return Decoded::Invalid(format!(
            "`{}`: {number} × {} + {} overflows",
            point.name, point.scale, point.offset
        ));
    }
    Decoded::Value(value)
}

/// raw × scale + offset. A scale of 1/n with an integral n (0.1, 0.01, …) divides by n instead,
/// so that decimal values come out as the nearest double (1234 × 0.1 → 123.4, not
/// 123.40000000000001).
fn scaled(point: &Point, number: f64) -> f64 {
    let inv = 1.0 / point.scale;
    let v = if inv.abs() >= 1.0 && inv.abs() < 1e15 && inv.fract() == 0.0 {
        number / inv
    } else {
        number * point.scale
    };
    v + point.offset
}

/// Converts an engineering value to the raw value. `saturate`: clamp to the register's range
/// (device side) instead of refusing.
fn to_raw(point: &Point, value: f64, saturate: bool) -> Result<Raw, EncodeError> {
    let out_of_range = || {
        let (min, max) = point.representable_range();
        EncodeError::OutOfRange {
            point: point.name.clone(),
            value,
            min,
            max,
            limit: Limit::Register(point.value_type),
        }
    };
    if point.value_type == ValueType::Bool {
        let set = if saturate {
            value != 0.0
        } else if value == 0.0 || value == 1.0 {
            value == 1.0
        } else {
            return Err(out_of_range());
        };
        let word = match (set, point.bit) {
            (false, _) => 0,
            (true, Some(b)) if !point.table.is_bits() => 1u16 << (b & 15),
            (true, _) => 1,
        };
        return Ok(Raw::W16(word));
    }
    let x = (value - point.offset) / point.scale;
    if x.is_nan() {
        return Err(out_of_range());
    }
    match point.value_type {
        ValueType::F32 => {
            let limit = f64::from(f32::MAX);
            let x = if x.abs() <= limit {
                x
            } else if saturate {
                x.clamp(-limit, limit)
            } else {
                return Err(out_of_range());
            };
            Ok(Raw::W32((x as f32).to_bits()))
        }
        ValueType::F64 => {
            let x = if x.is_finite() {
                x
            } else if saturate {
                x.clamp(f64::MIN, f64::MAX)
            } else {
                return Err(out_of_range());
            };
            Ok(Raw::W64(x.to_bits()))
        }
        t => {
            let (lo, hi) = t.int_range().unwrap_or((0.0, 0.0));
            let r = x.round();
            let r = if (lo..=hi).contains(&r) {
                r
            } else if saturate {
                r.clamp(lo, hi)
            } else {
                return Err(out_of_range());
            };
            // In range and integral: the casts are exact.
            Ok(int_raw(t, r as i64))
        }
    }
}

fn int_raw(t: ValueType, r: i64) -> Raw {
    match t {
        ValueType::U16 | ValueType::I16 | ValueType::Bool => Raw::W16(r as u16),
        ValueType::U32 | ValueType::I32 | ValueType::F32 => Raw::W32(r as u32),
        ValueType::F64 => Raw::W64(r as u64),
    }
}

/// Encodes `value` for writing to `point`: `(value - offset) / scale`, rounded to the nearest
/// integer for integer types, as words in the point's word order (for a coil: one word, 0 or 1).
///
/// Refuses a point that is not writable, a non-finite value, a value outside the point's
/// `min`/`max` ([`Limit::Map`]) or outside what its register can hold at this scale
/// ([`Limit::Register`]; a coil takes only 0 or 1), and a value that would encode to a sentinel.
pub fn encode(point: &Point, value: f64) -> Result<Vec<u16>, EncodeError> {
    if !point.writable {
        return Err(EncodeError::NotWritable {
            point: point.name.clone(),
        });
    }
    if !value.is_finite() {
        return Err(EncodeError::NotFinite {
            point: point.name.clone(),
        });
    }
    if !point.within_limits(value) {
        return Err(EncodeError::OutOfRange {
            point: point.name.clone(),
            value,
            min: point.min.unwrap_or(f64::NEG_INFINITY),
            max: point.max.unwrap_or(f64::INFINITY),
            limit: Limit::Map,
        });
    }
    let raw = to_raw(point, value, false)?;
    if let Some(key) = raw.sentinel_key().filter(|&k| point.is_sentinel(k)) {
        return Err(EncodeError::Sentinel {
            point: point.name.clone(),
            value,
            raw: key,
        });
    }
    Ok(raw.words(point.word_order))
}

/// Device side (a simulated device's Modbus server, tests): the words a device presents for a
/// reading of `point`.
///
/// Unlike [`encode`] it ignores `writable` and `min`/`max`, and does what device firmware does
/// with a value its register cannot hold: it saturates at the register's range, and a value
/// that would land on a sentinel is moved one step toward zero (an `i16` with sentinels
/// `0x7FFF`/`0x8000` saturates at −3276.7…3276.6 for scale 0.1). `None` or a non-finite value
/// ("no value") gives the point's first sentinel, or a quiet NaN for a float without sentinels;
/// an integer point without sentinels cannot say "no value" and gives
/// [`EncodeError::NotFinite`]. For a bit of a register the result is the word with only that
/// bit set (or 0): the caller combines the bits of a shared word.
pub fn encode_reading(point: &Point, value: Option<f64>) -> Result<Vec<u16>, EncodeError> {
    let value = match value.filter(|v| v.is_finite()) {
        Some(v) => v,
        None => {
            let raw = match (point.sentinels.first(), point.value_type) {
                (Some(&s), ValueType::U32 | ValueType::I32 | ValueType::F32) => Raw::W32(s),
                (Some(&s), _) => Raw::W16(s as u16),
                (None, ValueType::F32) => Raw::W32(f32::NAN.to_bits()),
                (None, ValueType::F64) => Raw::W64(f64::NAN.to_bits()),
                (None, _) => {
                    return Err(EncodeError::NotFinite {
                        point: point.name.clone(),
                    })
                }
            };
            return Ok(raw.words(point.word_order));
        }
    };
    let mut raw = to_raw(point, value, true)?;
    if let (Some(range), Raw::W16(_) | Raw::W32(_)) = (point.value_type.int_range(), raw) {
        // Step off sentinels toward zero (away from the range's end).
        let signed = |r: Raw| -> i64 {
            match (point.value_type, r) {
                (ValueType::I16, Raw::W16(x)) => i64::from(x as i16),
                (ValueType::I32, Raw::W32(x)) => i64::from(x as i32),
                (_, Raw::W16(x)) => i64::from(x),
                (_, Raw::W32(x)) => i64::from(x),
                (_, Raw::W64(x)) => x as i64,
            }
        };
        let start = signed(raw);
        let step = if start > 0 { -1 } else { 1 };
        let mut r = start;
        for _ in 0..=point.sentinels.len() {
            let candidate = int_raw(point.value_type, r);
            if !candidate.sentinel_key().is_some_and(|k| point.is_sentinel(k)) {
                break;
            }
            let next = r + step;
            if !(range.0..=range.1).contains(&(next as f64)) {
                break;
            }
            r = next;
        }
        raw = int_raw(point.value_type, r);
    }
    if let Some(key) = raw
        .sentinel_key()
        .filter(|&k| point.is_sentinel(k) && !point.is_register_bit())
    {
        return Err(EncodeError::Sentinel {
            point: point.name.clone(),
            value,
            raw: key,
        });
    }
    Ok(raw.words(point.word_order))
}

/// A generated map of `points` points (u16 input registers named `p0`, `p1`, … at addresses 0,
/// 1, …, at most 65,536), for load tests and `coolplane bench --map-points`.
pub fn generated_map_toml(points: usize) -> String {
    let mut s = String::with_capacity(points * 64 + 64);
    s.push_str("[device]\nname = \"generated\"\n");
    for i in 0..points.min(65_536) {
        s.push_str(&format!(
            "\n[[point]]\nname = \"p{i}\"\ntable = \"input\"\naddress = {i}\ntype = \"u16\"\n"
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 60,000-point map loads (duplicate names are found in linear time; the old pairwise
    /// check took about 9 s on this map), every point where the file put it, and a duplicate at
    /// the very end is still found and named. Timed by `coolplane bench --map-points 60000`.
    #[test]
    fn a_60000_point_map_loads_with_every_point_and_duplicates_found() {
        let text = generated_map_toml(60_000);
        let map = RegisterMap::from_toml_str("big.toml", &text).unwrap();
        assert_eq!(map.points.len(), 60_000);
        for i in [0usize, 1, 29_999, 59_999] {
            let p = map.point(&format!("p{i}")).unwrap();
            assert_eq!((p.address as usize, p.table), (i, Table::Input));
        }
        let dup = format!("{text}\n[[point]]\nname = \"p7\"\ntable = \"input\"\naddress = 60000\ntype = \"u16\"\n");
        let e = RegisterMap::from_toml_str("big.toml", &dup).unwrap_err().to_string();
        assert!(e.contains("p7") && e.contains("duplicate name (also point #8)"), "{e}");
    }

    const CDU: &str = include_str!("../../maps/coolplane-cdu.toml");
    const FACILITY: &str = include_str!("../../maps/coolplane-facility.toml");
    const METER: &str = include_str!("../../maps/coolplane-meter.toml");
    const VENDOR: &str = include_str!("../../maps/example-vendor-cdu.toml");

    fn all_maps() -> Vec<(&'static str, RegisterMap)> {
        [
            ("coolplane-cdu.toml", CDU),
            ("coolplane-facility.toml", FACILITY),
            ("coolplane-meter.toml", METER),
            ("example-vendor-cdu.toml", VENDOR),
        ]
        .into_iter()
        .map(|(f, t)| (f, RegisterMap::from_toml_str(f, t).unwrap_or_else(|e| panic!("{e}"))))
        .collect()
    }

    fn pt(table: Table, address: u16, value_type: ValueType) -> Point {
        Point {
            name: "p".into(),
            table,
            address,
            value_type,
            bit: None,
            scale: 1.0,
            offset: 0.0,
            sentinels: vec![],
            word_order: WordOrder::HighFirst,
            writable: true,
            min: None,
            max: None,
            unit: String::new(),
            description: String::new(),
        }
    }

    fn check(map: &RegisterMap, name: &str, table: Table, address: u16, t: ValueType, scale: f64) -> Point {
        let p = map
            .point(name)
            .unwrap_or_else(|| panic!("{}: no point {name}", map.name))
            .clone();
        assert_eq!((p.table, p.address, p.value_type), (table, address, t), "{name}");
        assert!((p.scale - scale).abs() < 1e-12, "{name}: scale {}", p.scale);
        p
    }

    #[test]
    fn cdu_map() {
        let m = RegisterMap::from_toml_str("coolplane-cdu.toml", CDU).unwrap();
        assert_eq!((m.max_read_registers, m.max_write_registers), (32, 30));
        use Table::*;
        use ValueType::*;
        let s = check(&m, "supply_temp_c", Input, 0, I16, 0.1);
        assert_eq!(s.sentinels, vec![0x7FFF, 0x8000]);
        assert!(!s.writable);
        check(&m, "return_temp_c", Input, 1, I16, 0.1);
        let f = check(&m, "flow_lpm", Input, 2, U16, 0.1);
        assert_eq!(f.sentinels, vec![0xFFFF]);
        check(&m, "facility_in_temp_c", Input, 3, I16, 0.1);
        check(&m, "heat_kw", Input, 4, I16, 0.1);
        check(&m, "pump_speed_pct", Input, 5, I16, 0.1);
        check(&m, "valve_pct", Input, 6, I16, 0.1);
        check(&m, "pump_power_kw", Input, 7, I16, 0.1);
        check(&m, "supply_setpoint_active_c", Input, 8, I16, 0.1);
        check(&m, "flow_setpoint_active_lpm", Input, 9, U16, 1.0);
        check(&m, "alarms", Input, 10, U16, 1.0);
        check(&m, "local_fallback", Input, 11, U16, 1.0);
        let hb = check(&m, "heartbeat_echo", Input, 12, U16, 1.0);
        assert!(hb.sentinels.is_empty(), "the heartbeat wraps through every value");
        for (name, a) in [
            ("supply_temp_f32_c", 100),
            ("return_temp_f32_c", 102),
            ("flow_f32_lpm", 104),
            ("heat_f32_kw", 106),
            ("pump_power_f32_kw", 108),
        ] {
            let p = check(&m, name, Input, a, F32, 1.0);
            assert_eq!(p.word_order, WordOrder::LowFirst, "{name}");
        }
        let sp = check(&m, "supply_setpoint_c", Holding, 0, I16, 0.1);
        assert!(sp.writable);
        assert_eq!((sp.min, sp.max), (Some(5.0), Some(60.0)));
        let fs = check(&m, "flow_setpoint_lpm", Holding, 1, U16, 1.0);
        assert_eq!((fs.min, fs.max), (Some(0.0), Some(6000.0)));
        assert!(check(&m, "heartbeat", Holding, 2, U16, 1.0).writable);
        let bt = check(&m, "bms_timeout_s", Holding, 3, U16, 1.0);
        assert_eq!((bt.min, bt.max), (Some(10.0), Some(3600.0)));
        let ack = check(&m, "alarm_ack", Holding, 4, U16, 1.0);
        assert_eq!((ack.min, ack.max, ack.writable), (Some(0.0), Some(1.0), true));
        for p in &m.points {
            assert_eq!(
                p.writable,
                p.table == Holding,
                "{}: only the holding registers are writable",
                p.name
            );
        }
    }

    #[test]
    fn cdu_alarm_bits_match_core() {
        use coolplane_core::signals::cdu_alarm;
        let m = RegisterMap::from_toml_str("coolplane-cdu.toml", CDU).unwrap();
        for (name, mask) in [
            ("alarm_low_flow", cdu_alarm::LOW_FLOW),
            ("alarm_high_supply_temp", cdu_alarm::HIGH_SUPPLY_TEMP),
            ("alarm_leak", cdu_alarm::LEAK),
            ("alarm_pump_fault", cdu_alarm::PUMP_FAULT),
            ("alarm_sensor_fault", cdu_alarm::SENSOR_FAULT),
            ("alarm_bms_timeout", cdu_alarm::BMS_TIMEOUT),
            ("alarm_valve_saturated", cdu_alarm::VALVE_SATURATED),
        ] {
            let p = m.point(name).unwrap();
            assert_eq!(
                (p.table, p.address, p.value_type),
                (Table::Input, 10, ValueType::Bool),
                "{name}"
            );
            assert_eq!(1u16 << p.bit.unwrap(), mask, "{name}");
            // Decoding the alarm word with only this bit set lights exactly this point.
            let alarms = m.point("alarms").unwrap();
            assert_eq!(decode(alarms, &[mask]), Decoded::Value(f64::from(mask)));
            assert_eq!(decode(p, &[mask]), Decoded::Value(1.0));
            assert_eq!(decode(p, &[!mask & 0x7F]), Decoded::Value(0.0));
        }
    }

    #[test]
    fn facility_meter_vendor_maps() {
        use Table::*;
        use ValueType::*;
        let f = RegisterMap::from_toml_str("coolplane-facility.toml", FACILITY).unwrap();
        check(&f, "supply_temp_c", Input, 0, I16, 0.1);
        let flow = check(&f, "flow_lpm", Input, 2, U16, 1.0);
        assert_eq!(decode(&flow, &[25_000]), Decoded::Value(25_000.0));
        check(&f, "adiabatic_on", Input, 5, U16, 1.0);
        check(&f, "chiller_on", Input, 6, U16, 1.0);
        check(&f, "fan_power_kw", Input, 7, U16, 0.1);
        check(&f, "outdoor_wet_bulb_c", Input, 11, I16, 0.1);
        check(&f, "heartbeat_echo", Input, 13, U16, 1.0);
        let sp = check(&f, "supply_setpoint_c", Holding, 0, I16, 0.1);
        assert_eq!((sp.min, sp.max, sp.writable), (Some(10.0), Some(45.0), true));
        check(&f, "heartbeat", Holding, 1, U16, 1.0);
        check(&f, "bms_timeout_s", Holding, 2, U16, 1.0);

        let m = RegisterMap::from_toml_str("coolplane-meter.toml", METER).unwrap();
        for (name, a) in [("facility_power_kw", 0), ("it_power_kw", 2), ("power_budget_kw", 4)] {
            assert_eq!(check(&m, name, Input, a, F32, 1.0).word_order, WordOrder::HighFirst);
        }
        for (name, a) in [
            ("facility_power_u32_kw", 10),
            ("it_power_u32_kw", 12),
            ("power_budget_u32_kw", 14),
        ] {
            assert_eq!(check(&m, name, Input, a, U32, 0.1).word_order, WordOrder::HighFirst);
        }
        let p = m.point("it_power_u32_kw").unwrap();
        assert_eq!(decode(p, &[0x0012, 0xD687]), Decoded::Value(123_456.7));

        let v = RegisterMap::from_toml_str("example-vendor-cdu.toml", VENDOR).unwrap();
        assert_eq!(v.address_base.holding, 40001);
        let s = check(&v, "supply_temp_c", Holding, 1, I16, 0.1);
        assert_eq!(v.file_address(&s), 40002);
        assert_eq!(s.sentinels, vec![0x7FFF, 0x8000], "-32768 is 0x8000");
        check(&v, "supply_temp_f", Holding, 2, I16, 0.1);
        let heat = check(&v, "heat_kw", Holding, 13, F32, 1.0);
        assert_eq!(heat.word_order, WordOrder::LowFirst);
        assert_eq!(
            check(&v, "run_hours_h", Holding, 15, U32, 1.0).word_order,
            WordOrder::HighFirst
        );
        let amb = check(&v, "ambient_temp_c", Holding, 17, U16, 0.1);
        assert!(close(decode(&amb, &[723]).value().unwrap(), 22.3, 1e-12));
        let sp = check(&v, "supply_setpoint_c", Holding, 100, I16, 0.1);
        assert!(sp.writable);
        assert_eq!(v.max_write_registers, 1);
        for p in &v.points {
            assert_eq!(p.table, Holding, "{}", p.name);
        }
    }

    #[test]
    fn known_words() {
        let mut p = pt(Table::Holding, 0, ValueType::F32);
        assert_eq!(encode(&p, 12.5).unwrap(), vec![0x4148, 0x0000]);
        assert_eq!(decode(&p, &[0x4148, 0x0000]), Decoded::Value(12.5));
        p.word_order = WordOrder::LowFirst;
        assert_eq!(encode(&p, 12.5).unwrap(), vec![0x0000, 0x4148]);
        assert_eq!(decode(&p, &[0x0000, 0x4148]), Decoded::Value(12.5));

        let mut p = pt(Table::Holding, 0, ValueType::I16);
        p.scale = 0.1;
        assert_eq!(encode(&p, -12.3).unwrap(), vec![0xFF85]);
        assert_eq!(decode(&p, &[0xFF85]), Decoded::Value(-12.3));

        let mut p = pt(Table::Holding, 0, ValueType::U32);
        p.scale = 0.1;
        assert_eq!(encode(&p, 123_456.7).unwrap(), vec![0x0012, 0xD687]);
        p.word_order = WordOrder::LowFirst;
        assert_eq!(encode(&p, 123_456.7).unwrap(), vec![0xD687, 0x0012]);

        let p = pt(Table::Holding, 0, ValueType::I32);
        assert_eq!(encode(&p, -1.0).unwrap(), vec![0xFFFF, 0xFFFF]);
        assert_eq!(encode(&p, -65536.0).unwrap(), vec![0xFFFF, 0x0000]);

        let mut p = pt(Table::Holding, 0, ValueType::F64);
        assert_eq!(encode(&p, 1.0).unwrap(), vec![0x3FF0, 0, 0, 0]);
        p.word_order = WordOrder::LowFirst;
        assert_eq!(encode(&p, 1.0).unwrap(), vec![0, 0, 0, 0x3FF0]);
        assert_eq!(decode(&p, &[0, 0, 0, 0x3FF0]), Decoded::Value(1.0));

        let p = pt(Table::Coil, 0, ValueType::Bool);
        assert_eq!(encode(&p, 1.0).unwrap(), vec![1]);
        assert_eq!(encode(&p, 0.0).unwrap(), vec![0]);
        assert_eq!(decode(&p, &[1]), Decoded::Value(1.0));
        assert_eq!(decode(&p, &[0]), Decoded::Value(0.0));
    }

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol * (1.0 + b.abs())
    }

    #[test]
    fn round_trips_every_type_and_word_order() {
        let cases: &[(ValueType, f64, f64, &[f64])] = &[
            (ValueType::U16, 0.1, 0.0, &[0.0, 0.1, 12.3, 6553.5, 3000.0]),
            (ValueType::U16, 0.1, -50.0, &[-50.0, 0.0, 22.3, 6503.5]),
            (ValueType::I16, 0.1, 0.0, &[-3276.8, -12.3, 0.0, 45.6, 3276.7]),
            (ValueType::I16, 1.0, 0.0, &[-32768.0, -1.0, 0.0, 32767.0]),
            (ValueType::I16, -0.5, 10.0, &[10.0, 0.0, 20.5]),
            (ValueType::U32, 0.1, 0.0, &[0.0, 123_456.7, 429_496_729.5]),
            (ValueType::I32, 0.01, 0.0, &[-21_474_836.48, -0.01, 0.0, 21_474_836.47]),
            (
                ValueType::F32,
                1.0,
                0.0,
                &[0.0, -0.0, 12.5, -273.15, 1.0e30, f64::from(f32::MIN_POSITIVE)],
            ),
            (ValueType::F32, 0.001, 5.0, &[5.0, 6.25]),
            (
                ValueType::F64,
                1.0,
                0.0,
                &[0.0, 1.0, -1.0e300, std::f64::consts::PI, 5e-324],
            ),
        ];
        for &(t, scale, offset, values) in cases {
            for order in [WordOrder::HighFirst, WordOrder::LowFirst] {
                let mut p = pt(Table::Holding, 0, t);
                p.scale = scale;
                p.offset = offset;
                p.word_order = order;
                for &v in values {
                    let w = encode(&p, v).unwrap_or_else(|e| panic!("{t} {order} {v}: {e}"));
                    assert_eq!(w.len(), usize::from(p.width()));
                    let back = decode(&p, &w).value().unwrap();
                    let tol = if t == ValueType::F32 { 1e-6 } else { 1e-12 };
                    assert!(
                        close(back, v, tol),
                        "{t} {order} scale {scale}: {v} -> {w:x?} -> {back}"
                    );
                    // The device-side encoder agrees with the client's for values in range.
                    assert_eq!(encode_reading(&p, Some(v)).unwrap(), w);
                }
                // A sweep of raw words decodes and re-encodes to the same words (integers).
                if t.int_range().is_some() {
                    for k in 0..=200u32 {
                        let w: Vec<u16> = (0..p.width()).map(|i| (k * 331 + u32::from(i) * 7919) as u16).collect();
                        let v = decode(&p, &w).value().unwrap();
                        assert_eq!(encode(&p, v).unwrap(), w, "{t} {order} {v}");
                    }
                }
            }
        }
        // Word-swapped 32-bit words are the same pair in the other order.
        let mut hi = pt(Table::Input, 0, ValueType::U32);
        let mut lo = hi.clone();
        lo.word_order = WordOrder::LowFirst;
        hi.writable = true;
        lo.writable = true;
        let a = encode(&hi, 305_419_896.0).unwrap();
        let b = encode(&lo, 305_419_896.0).unwrap();
        assert_eq!(a, vec![0x1234, 0x5678]);
        assert_eq!(b, vec![0x5678, 0x1234]);
    }

    #[test]
    fn register_bits() {
        let mut p = pt(Table::Input, 10, ValueType::Bool);
        p.bit = Some(3);
        p.writable = false;
        assert_eq!(decode(&p, &[0b1000]), Decoded::Value(1.0));
        assert_eq!(decode(&p, &[0b0111]), Decoded::Value(0.0));
        assert_eq!(decode(&p, &[0xFFF7]), Decoded::Value(0.0));
        p.sentinels = vec![0xFFFF];
        assert_eq!(decode(&p, &[0xFFFF]), Decoded::Sentinel);
        assert_eq!(encode_reading(&p, Some(1.0)).unwrap(), vec![0b1000]);
        assert_eq!(encode_reading(&p, Some(0.0)).unwrap(), vec![0]);
        assert_eq!(encode_reading(&p, None).unwrap(), vec![0xFFFF]);
    }

    #[test]
    fn sentinels_and_invalid_floats() {
        let m = RegisterMap::from_toml_str("coolplane-cdu.toml", CDU).unwrap();
        let t = m.point("supply_temp_c").unwrap();
        assert_eq!(decode(t, &[0x7FFF]), Decoded::Sentinel);
        assert_eq!(decode(t, &[0x8000]), Decoded::Sentinel);
        assert_eq!(decode(t, &[0x7FFE]), Decoded::Value(3276.6));
        let f = m.point("flow_lpm").unwrap();
        assert_eq!(decode(f, &[0xFFFF]), Decoded::Sentinel);
        assert_eq!(decode(f, &[0xFFFE]), Decoded::Value(6553.4));
        // Word-swapped float: the device's "no value" quiet NaN is a sentinel, any other NaN or
        // an infinity is invalid.
        let ff = m.point("supply_temp_f32_c").unwrap();
        assert_eq!(decode(ff, &[0x0000, 0x7FC0]), Decoded::Sentinel);
        assert!(matches!(decode(ff, &[0x0001, 0x7FC0]), Decoded::Invalid(_)));
        assert!(matches!(decode(ff, &[0x0000, 0x7F80]), Decoded::Invalid(_)), "+inf");
        assert!(matches!(decode(ff, &[0x0000, 0xFF80]), Decoded::Invalid(_)), "-inf");
        assert_eq!(decode(ff, &[0x0000, 0x41C8]), Decoded::Value(25.0));
        // A float without sentinels: NaN is invalid.
        let p = pt(Table::Input, 0, ValueType::F32);
        assert!(matches!(decode(&p, &[0x7FC0, 0x0000]), Decoded::Invalid(_)));
        let p = pt(Table::Input, 0, ValueType::F64);
        assert!(matches!(decode(&p, &[0x7FF8, 0, 0, 0]), Decoded::Invalid(_)));
        // Wrong number of words.
        assert!(matches!(decode(t, &[1, 2]), Decoded::Invalid(_)));
        assert!(matches!(decode(ff, &[1]), Decoded::Invalid(_)));
        // 32-bit sentinel on an integer.
        let mut p = pt(Table::Input, 0, ValueType::U32);
        p.sentinels = vec![0xFFFF_FFFF];
        assert_eq!(decode(&p, &[0xFFFF, 0xFFFF]), Decoded::Sentinel);
        assert_eq!(decode(&p, &[0xFFFF, 0xFFFE]), Decoded::Value(f64::from(0xFFFF_FFFEu32)));
    }

    #[test]
    fn encode_refusals_name_point_and_limit() {
        let m = RegisterMap::from_toml_str("coolplane-cdu.toml", CDU).unwrap();
        let sp = m.point("supply_setpoint_c").unwrap();
        match encode(sp, 60.1) {
            Err(EncodeError::OutOfRange {
                point,
                value,
                min,
                max,
                limit,
            }) => {
                assert_eq!(
                    (point.as_str(), value, min, max, limit),
                    ("supply_setpoint_c", 60.1, 5.0, 60.0, Limit::Map)
                );
            }
            other => panic!("{other:?}"),
        }
        let e = encode(sp, 4.9).unwrap_err();
        assert!(
            e.to_string().contains("supply_setpoint_c") && e.to_string().contains("min/max"),
            "{e}"
        );
        assert_eq!(encode(sp, 60.0).unwrap(), vec![600]);
        assert_eq!(encode(sp, 5.0).unwrap(), vec![50]);
        assert_eq!(
            encode(sp, f64::NAN),
            Err(EncodeError::NotFinite {
                point: "supply_setpoint_c".into()
            })
        );
        assert_eq!(
            encode(sp, f64::INFINITY),
            Err(EncodeError::NotFinite {
                point: "supply_setpoint_c".into()
            })
        );

        let t = m.point("supply_temp_c").unwrap();
        assert_eq!(
            encode(t, 20.0),
            Err(EncodeError::NotWritable {
                point: "supply_temp_c".into()
            })
        );
        assert!(encode(t, 20.0).unwrap_err().to_string().contains("supply_temp_c"));

        // Register range: a u16 ×0.1 without map limits.
        let mut p = pt(Table::Holding, 0, ValueType::U16);
        p.name = "flow_sp".into();
        p.scale = 0.1;
        match encode(&p, 6553.6) {
            Err(EncodeError::OutOfRange {
                point, min, max, limit, ..
            }) => {
                assert_eq!(point, "flow_sp");
                assert_eq!(limit, Limit::Register(ValueType::U16));
                assert!(min == 0.0 && close(max, 6553.5, 1e-12), "{min} {max}");
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            encode(&p, -0.1),
            Err(EncodeError::OutOfRange {
                limit: Limit::Register(_),
                ..
            })
        ));
        assert_eq!(encode(&p, -0.04).unwrap(), vec![0], "rounds to 0");
        // i16 range.
        let mut p = pt(Table::Holding, 0, ValueType::I16);
        p.name = "t".into();
        p.scale = 0.1;
        assert!(encode(&p, 3276.7).is_ok());
        let e = encode(&p, 3276.8).unwrap_err();
        assert!(e.to_string().contains("i16"), "{e}");
        assert!(encode(&p, -3276.9).is_err());
        // Sentinel collision.
        p.sentinels = vec![0x7FFF, 0x8000];
        assert_eq!(
            encode(&p, 3276.7),
            Err(EncodeError::Sentinel {
                point: "t".into(),
                value: 3276.7,
                raw: 0x7FFF
            })
        );
        // f32 beyond its range.
        let mut p = pt(Table::Holding, 0, ValueType::F32);
        p.name = "f".into();
        assert!(matches!(
            encode(&p, 1e39),
            Err(EncodeError::OutOfRange {
                limit: Limit::Register(ValueType::F32),
                ..
            })
        ));
        // Coils take 0 or 1.
        let p = pt(Table::Coil, 0, ValueType::Bool);
        assert!(matches!(encode(&p, 0.5), Err(EncodeError::OutOfRange { .. })));
        // Heartbeat wraps through the whole u16 range, alarm_ack is 0..=1.
        let hb = m.point("heartbeat").unwrap();
        assert_eq!(encode(hb, 65535.0).unwrap(), vec![0xFFFF]);
        assert!(encode(m.point("alarm_ack").unwrap(), 2.0).is_err());
    }

    #[test]
    fn encode_reading_saturates_and_avoids_sentinels() {
        let m = RegisterMap::from_toml_str("coolplane-cdu.toml", CDU).unwrap();
        let t = m.point("supply_temp_c").unwrap();
        assert_eq!(encode_reading(t, Some(25.04)).unwrap(), vec![250]);
        assert_eq!(encode_reading(t, Some(5000.0)).unwrap(), vec![0x7FFE]);
        assert_eq!(encode_reading(t, Some(-5000.0)).unwrap(), vec![0x8001]);
        assert_eq!(encode_reading(t, None).unwrap(), vec![0x7FFF]);
        assert_eq!(encode_reading(t, Some(f64::NAN)).unwrap(), vec![0x7FFF]);
        let f = m.point("flow_lpm").unwrap();
        assert_eq!(encode_reading(f, Some(1e9)).unwrap(), vec![0xFFFE]);
        assert_eq!(encode_reading(f, Some(-3.0)).unwrap(), vec![0]);
        let ff = m.point("heat_f32_kw").unwrap();
        assert_eq!(encode_reading(ff, None).unwrap(), vec![0x0000, 0x7FC0]);
        assert_eq!(encode_reading(ff, Some(12.5)).unwrap(), vec![0x0000, 0x4148]);
        let hb = m.point("heartbeat_echo").unwrap();
        assert_eq!(encode_reading(hb, Some(65535.0)).unwrap(), vec![0xFFFF]);
        assert!(matches!(encode_reading(hb, None), Err(EncodeError::NotFinite { .. })));
        let p = pt(Table::Input, 0, ValueType::F64);
        assert!(matches!(
            decode(&p, &encode_reading(&p, None).unwrap()),
            Decoded::Invalid(_)
        ));
    }

    /// Checks a plan against its map: every point in exactly one block, blocks within the
    /// device's limit, one table each, non-overlapping.
    fn check_plan(map: &RegisterMap, plan: &[ReadBlock]) {
        for b in plan {
            let limit = if b.table.is_bits() {
                map.max_read_bits
            } else {
                map.max_read_registers
            };
            assert!(b.count >= 1 && b.count <= limit, "{b:?}");
            assert!(u32::from(b.start) + u32::from(b.count) <= 65536, "{b:?}");
        }
        for (i, a) in plan.iter().enumerate() {
            for b in &plan[i + 1..] {
                let disjoint = a.table != b.table
                    || u32::from(a.start) + u32::from(a.count) <= u32::from(b.start)
                    || u32::from(b.start) + u32::from(b.count) <= u32::from(a.start);
                assert!(disjoint, "{a:?} {b:?}");
            }
        }
        for p in &map.points {
            let n = plan.iter().filter(|b| b.covers(p)).count();
            assert_eq!(n, 1, "{} is in {n} blocks", p.name);
        }
        let mut decoded: Vec<usize> = plan
            .iter()
            .flat_map(|b| map.decode_block(b, &vec![0; usize::from(b.count)]))
            .map(|(i, _)| i)
            .collect();
        decoded.sort_unstable();
        assert_eq!(decoded, (0..map.points.len()).collect::<Vec<_>>());
    }

    #[test]
    fn read_plan_of_shipped_maps() {
        for (file, m) in all_maps() {
            for gap in [0, 1, 4, 16, 200] {
                check_plan(&m, &m.read_plan(gap));
            }
            eprintln!("{file}: {:?}", m.read_plan(4));
        }
        let m = RegisterMap::from_toml_str("coolplane-cdu.toml", CDU).unwrap();
        let b = |table, start, count| ReadBlock { table, start, count };
        assert_eq!(
            m.read_plan(4),
            vec![
                b(Table::Input, 0, 13),
                b(Table::Input, 100, 10),
                b(Table::Holding, 0, 5)
            ],
            "input 0..=12 (bits share the alarm word), the float block, the setpoints"
        );
        // The vendor map reads 16 registers at a time.
        let v = RegisterMap::from_toml_str("example-vendor-cdu.toml", VENDOR).unwrap();
        let plan = v.read_plan(4);
        assert!(plan.iter().all(|b| b.count <= 16));
        assert_eq!(plan[0], b(Table::Holding, 0, 15), "{plan:?}");
    }

    fn synthetic(max_read: u16, points: &[(&str, &str, u32, &str)]) -> RegisterMap {
        let mut text = format!("[device]\nname = \"t\"\nmax_read_registers = {max_read}\nmax_read_bits = {max_read}\n");
        for (name, table, address, t) in points {
            text.push_str(&format!(
                "[[point]]\nname = \"{name}\"\ntable = \"{table}\"\naddress = {address}\ntype = \"{t}\"\n"
            ));
        }
        RegisterMap::from_toml_str("t.toml", &text).unwrap()
    }

    #[test]
    fn read_plan_coalesces_splits_and_keeps_tables_apart() {
        let b = |table, start, count| ReadBlock { table, start, count };
        let m = synthetic(
            8,
            &[
                ("a", "input", 0, "u16"),
                ("b", "input", 1, "f32"),
                ("c", "input", 3, "i16"),
                ("h", "holding", 4, "u16"),
                ("d", "input", 6, "u16"), // 2 unused registers after c
                ("e", "input", 7, "f64"), // 7..=10: beyond 8 from 0
                ("k", "coil", 0, "bool"),
                ("k2", "coil", 1, "bool"),
                ("x", "discrete", 1, "bool"),
                ("z", "input", 65534, "u32"),
            ],
        );
        assert_eq!(
            m.read_plan(0),
            vec![
                b(Table::Coil, 0, 2),
                b(Table::Discrete, 1, 1),
                b(Table::Input, 0, 4),
                b(Table::Input, 6, 5),
                b(Table::Input, 65534, 2),
                b(Table::Holding, 4, 1),
            ]
        );
        assert_eq!(
            m.read_plan(2),
            vec![
                b(Table::Coil, 0, 2),
                b(Table::Discrete, 1, 1),
                b(Table::Input, 0, 7),
                b(Table::Input, 7, 4),
                b(Table::Input, 65534, 2),
                b(Table::Holding, 4, 1),
            ]
        );
        for gap in [0, 1, 2, 3, 100, u16::MAX] {
            check_plan(&m, &m.read_plan(gap));
        }
        // Split at max_read_registers: 40 adjacent u16 with a limit of 16.
        let names: Vec<String> = (0..40).map(|i| format!("p{i}")).collect();
        let pts: Vec<(&str, &str, u32, &str)> = names
            .iter()
            .enumerate()
            .map(|(i, n)| (n.as_str(), "holding", i as u32, "u16"))
            .collect();
        let m = synthetic(16, &pts);
        assert_eq!(
            m.read_plan(0),
            vec![
                b(Table::Holding, 0, 16),
                b(Table::Holding, 16, 16),
                b(Table::Holding, 32, 8)
            ]
        );
        check_plan(&m, &m.read_plan(0));
        // A 2-register value never straddles a split: 15 u16 then an f32 with a limit of 16.
        let mut pts: Vec<(&str, &str, u32, &str)> = names
            .iter()
            .take(15)
            .enumerate()
            .map(|(i, n)| (n.as_str(), "input", i as u32, "u16"))
            .collect();
        pts.push(("f", "input", 15, "f32"));
        let m = synthetic(16, &pts);
        assert_eq!(m.read_plan(0), vec![b(Table::Input, 0, 15), b(Table::Input, 15, 2)]);
    }

    #[test]
    fn decode_block_of_the_cdu() {
        let m = RegisterMap::from_toml_str("coolplane-cdu.toml", CDU).unwrap();
        let plan = m.read_plan(4);
        // Build the device's input registers with the device-side encoder.
        let readings: &[(&str, Option<f64>)] = &[
            ("supply_temp_c", Some(30.2)),
            ("return_temp_c", None),
            ("flow_lpm", Some(1234.5)),
            ("heat_kw", Some(2999.9)),
            ("alarms", Some(f64::from(0b101u16))),
            ("local_fallback", Some(1.0)),
            ("heartbeat_echo", Some(4242.0)),
            ("supply_temp_f32_c", Some(30.25)),
        ];
        let mut input = vec![0u16; 110];
        for &(name, v) in readings {
            let p = m.point(name).unwrap();
            let w = encode_reading(p, v).unwrap();
            let a = usize::from(p.address);
            input[a..a + w.len()].copy_from_slice(&w);
        }
        let mut got = std::collections::HashMap::new();
        for b in plan.iter().filter(|b| b.table == Table::Input) {
            let words = &input[usize::from(b.start)..usize::from(b.start + b.count)];
            for (i, d) in m.decode_block(b, words) {
                got.insert(m.points[i].name.clone(), d);
            }
        }
        let v = |n: &str| got[n].clone();
        assert_eq!(v("supply_temp_c"), Decoded::Value(30.2));
        assert_eq!(v("return_temp_c"), Decoded::Sentinel);
        assert_eq!(v("flow_lpm"), Decoded::Value(1234.5));
        assert_eq!(v("heat_kw"), Decoded::Value(2999.9));
        assert_eq!(v("alarms"), Decoded::Value(5.0));
        assert_eq!(v("alarm_low_flow"), Decoded::Value(1.0));
        assert_eq!(v("alarm_high_supply_temp"), Decoded::Value(0.0));
        assert_eq!(v("alarm_leak"), Decoded::Value(1.0));
        assert_eq!(v("local_fallback"), Decoded::Value(1.0));
        assert_eq!(v("heartbeat_echo"), Decoded::Value(4242.0));
        assert_eq!(v("supply_temp_f32_c"), Decoded::Value(30.25));
        assert_eq!(got.len(), m.points_in(Table::Input).count());
        // A short reply: the points it does not reach are invalid, the rest decode.
        let first = plan[0];
        let short = m.decode_block(&first, &input[..5]);
        assert_eq!(short.len(), 20, "13 registers hold 13 word points and 7 alarm bits");
        assert_eq!(short[0].1, Decoded::Value(30.2));
        assert!(short
            .iter()
            .filter(|(i, _)| m.points[*i].address >= 5)
            .all(|(_, d)| matches!(d, Decoded::Invalid(_))));
    }

    fn bad(text: &str) -> MapError {
        match RegisterMap::from_toml_str("bad.toml", text) {
            Ok(_) => panic!("accepted:\n{text}"),
            Err(e) => e,
        }
    }

    fn assert_invalid(text: &str, point: &str, field: &str) {
        match bad(text) {
            MapError::Invalid {
                file,
                point: p,
                field: f,
                message,
            } => {
                assert_eq!(
                    (file.as_str(), p.as_str(), f.as_str()),
                    ("bad.toml", point, field),
                    "{message}"
                );
                let shown = MapError::Invalid {
                    file,
                    point: p,
                    field: f,
                    message,
                }
                .to_string();
                assert!(
                    shown.contains("bad.toml") && shown.contains(point) && shown.contains(field),
                    "{shown}"
                );
            }
            other => panic!("expected Invalid({point}, {field}), got {other}"),
        }
    }

    const HEAD: &str = "[device]\nname = \"t\"\nmax_read_registers = 32\nmax_write_registers = 30\n";

    fn with_head(points: &str) -> String {
        format!("{HEAD}{points}")
    }

    #[test]
    fn bad_maps_are_refused_with_point_and_field() {
        let ok = "[[point]]\nname = \"a\"\ntable = \"input\"\naddress = 0\ntype = \"u16\"\n";
        assert!(RegisterMap::from_toml_str("ok.toml", &with_head(ok)).is_ok());
        let cases: &[(&str, &str, &str)] = &[
            // duplicate name
            (
                "[[point]]\nname = \"a\"\ntable = \"input\"\naddress = 0\ntype = \"u16\"\n\
                 [[point]]\nname = \"a\"\ntable = \"input\"\naddress = 1\ntype = \"u16\"\n",
                "a",
                "name",
            ),
            // overlap: an f32 at 0..=1 and a u16 at 1
            (
                "[[point]]\nname = \"f\"\ntable = \"input\"\naddress = 0\ntype = \"f32\"\n\
                 [[point]]\nname = \"g\"\ntable = \"input\"\naddress = 1\ntype = \"u16\"\n",
                "g",
                "address",
            ),
            // overlap reported on the later point even when it sorts first
            (
                "[[point]]\nname = \"g\"\ntable = \"holding\"\naddress = 1\ntype = \"u16\"\n\
                 [[point]]\nname = \"f\"\ntable = \"holding\"\naddress = 0\ntype = \"i32\"\n",
                "f",
                "address",
            ),
            // two bits with the same bit number
            (
                "[[point]]\nname = \"b1\"\ntable = \"input\"\naddress = 3\ntype = \"bool\"\nbit = 2\n\
                 [[point]]\nname = \"b2\"\ntable = \"input\"\naddress = 3\ntype = \"bool\"\nbit = 2\n",
                "b2",
                "address",
            ),
            // a bit inside an i16
            (
                "[[point]]\nname = \"t\"\ntable = \"input\"\naddress = 3\ntype = \"i16\"\n\
                 [[point]]\nname = \"b\"\ntable = \"input\"\naddress = 3\ntype = \"bool\"\nbit = 0\n",
                "b",
                "address",
            ),
            // two coils at one address
            (
                "[[point]]\nname = \"c1\"\ntable = \"coil\"\naddress = 3\ntype = \"bool\"\n\
                 [[point]]\nname = \"c2\"\ntable = \"coil\"\naddress = 3\ntype = \"bool\"\n",
                "c2",
                "address",
            ),
            ("[[point]]\nname = \"c\"\ntable = \"coil\"\naddress = 0\ntype = \"f32\"\n", "c", "type"),
            ("[[point]]\nname = \"d\"\ntable = \"discrete\"\naddress = 0\ntype = \"u16\"\n", "d", "type"),
            ("[[point]]\nname = \"w\"\ntable = \"input\"\naddress = 0\ntype = \"u16\"\nwritable = true\n", "w", "writable"),
            ("[[point]]\nname = \"w\"\ntable = \"discrete\"\naddress = 0\ntype = \"bool\"\nwritable = true\n", "w", "writable"),
            (
                "[[point]]\nname = \"w\"\ntable = \"holding\"\naddress = 0\ntype = \"bool\"\nbit = 1\nwritable = true\n",
                "w",
                "writable",
            ),
            ("[[point]]\nname = \"u\"\ntable = \"input\"\naddress = 0\ntype = \"float\"\n", "u", "type"),
            ("[[point]]\nname = \"u\"\ntable = \"input\"\naddress = 0\n", "u", "type"),
            ("[[point]]\nname = \"u\"\ntable = \"inputs\"\naddress = 0\ntype = \"u16\"\n", "u", "table"),
            ("[[point]]\nname = \"u\"\naddress = 0\ntype = \"u16\"\n", "u", "table"),
            ("[[point]]\nname = \"u\"\ntable = \"input\"\ntype = \"u16\"\n", "u", "address"),
            (
                "[[point]]\nname = \"m\"\ntable = \"holding\"\naddress = 0\ntype = \"u16\"\nwritable = true\nmin = 10\nmax = 5\n",
                "m",
                "min",
            ),
            ("[[point]]\nname = \"m\"\ntable = \"input\"\naddress = 0\ntype = \"u16\"\nmax = nan\n", "m", "max"),
            ("[[point]]\nname = \"s\"\ntable = \"input\"\naddress = 0\ntype = \"u16\"\nscale = 0\n", "s", "scale"),
            ("[[point]]\nname = \"s\"\ntable = \"input\"\naddress = 0\ntype = \"u16\"\nscale = inf\n", "s", "scale"),
            ("[[point]]\nname = \"s\"\ntable = \"input\"\naddress = 0\ntype = \"u16\"\noffset = nan\n", "s", "offset"),
            ("[[point]]\nname = \"s\"\ntable = \"coil\"\naddress = 0\ntype = \"bool\"\nscale = 2\n", "s", "scale"),
            ("[[point]]\nname = \"a\"\ntable = \"input\"\naddress = 65535\ntype = \"u32\"\n", "a", "address"),
            ("[[point]]\nname = \"a\"\ntable = \"input\"\naddress = 65536\ntype = \"u16\"\n", "a", "address"),
            ("[[point]]\nname = \"a\"\ntable = \"input\"\naddress = -1\ntype = \"u16\"\n", "a", "address"),
            ("[[point]]\nname = \"b\"\ntable = \"input\"\naddress = 0\ntype = \"bool\"\n", "b", "bit"),
            ("[[point]]\nname = \"b\"\ntable = \"input\"\naddress = 0\ntype = \"bool\"\nbit = 16\n", "b", "bit"),
            ("[[point]]\nname = \"b\"\ntable = \"input\"\naddress = 0\ntype = \"u16\"\nbit = 1\n", "b", "bit"),
            ("[[point]]\nname = \"b\"\ntable = \"coil\"\naddress = 0\ntype = \"bool\"\nbit = 1\n", "b", "bit"),
            ("[[point]]\nname = \"s\"\ntable = \"input\"\naddress = 0\ntype = \"u16\"\nsentinels = [0x10000]\n", "s", "sentinels"),
            ("[[point]]\nname = \"s\"\ntable = \"input\"\naddress = 0\ntype = \"i16\"\nsentinels = [-32769]\n", "s", "sentinels"),
            ("[[point]]\nname = \"s\"\ntable = \"input\"\naddress = 0\ntype = \"f64\"\nsentinels = [1]\n", "s", "sentinels"),
            ("[[point]]\nname = \"s\"\ntable = \"coil\"\naddress = 0\ntype = \"bool\"\nsentinels = [1]\n", "s", "sentinels"),
            ("[[point]]\nname = \"o\"\ntable = \"input\"\naddress = 0\ntype = \"u16\"\nword_order = \"low-first\"\n", "o", "word_order"),
            ("[[point]]\nname = \"o\"\ntable = \"input\"\naddress = 0\ntype = \"f32\"\nword_order = \"swapped\"\n", "o", "word_order"),
            ("[[point]]\nname = \"1x\"\ntable = \"input\"\naddress = 0\ntype = \"u16\"\n", "#1", "name"),
            ("[[point]]\ntable = \"input\"\naddress = 0\ntype = \"u16\"\n", "#1", "name"),
        ];
        for &(points, point, field) in cases {
            assert_invalid(&with_head(points), point, field);
        }
        // A point wider than a read or a write request.
        let narrow = "[device]\nname = \"t\"\nmax_read_registers = 2\nmax_write_registers = 1\n";
        let f64_point = "[[point]]\nname = \"x\"\ntable = \"input\"\naddress = 0\ntype = \"f64\"\n";
        assert_invalid(&format!("{narrow}{f64_point}"), "x", "type");
        let f32_write = "[[point]]\nname = \"y\"\ntable = \"holding\"\naddress = 0\ntype = \"f32\"\nwritable = true\n";
        assert_invalid(&format!("{narrow}{f32_write}"), "y", "writable");
        // Address base: below it, and per table.
        let based = "[device]\nname = \"t\"\naddress_base = { input = 30001, holding = 40001 }\n";
        assert_invalid(
            &format!("{based}[[point]]\nname = \"q\"\ntable = \"input\"\naddress = 40\ntype = \"u16\"\n"),
            "q",
            "address",
        );
        let m = RegisterMap::from_toml_str(
            "ok.toml",
            &format!(
                "{based}[[point]]\nname = \"q\"\ntable = \"input\"\naddress = 30001\ntype = \"u16\"\n\
                 [[point]]\nname = \"r\"\ntable = \"holding\"\naddress = 40010\ntype = \"u16\"\n\
                 [[point]]\nname = \"c\"\ntable = \"coil\"\naddress = 7\ntype = \"bool\"\n"
            ),
        )
        .unwrap();
        assert_eq!(m.point("q").unwrap().address, 0);
        assert_eq!(m.point("r").unwrap().address, 9);
        assert_eq!(m.point("c").unwrap().address, 7);
        assert_eq!(m.file_address(m.point("r").unwrap()), 40010);
    }

    #[test]
    fn sharing_rules() {
        // An alarm word and its bits share a register; bits of different registers are apart.
        let ok = with_head(
            "[[point]]\nname = \"w\"\ntable = \"holding\"\naddress = 3\ntype = \"u16\"\nwritable = true\n\
             [[point]]\nname = \"b0\"\ntable = \"holding\"\naddress = 3\ntype = \"bool\"\nbit = 0\n\
             [[point]]\nname = \"b15\"\ntable = \"holding\"\naddress = 3\ntype = \"bool\"\nbit = 15\nsentinels = [0xFFFF]\n\
             [[point]]\nname = \"i\"\ntable = \"input\"\naddress = 3\ntype = \"f32\"\n",
        );
        let m = RegisterMap::from_toml_str("ok.toml", &ok).unwrap();
        assert_eq!(m.read_plan(0).len(), 2);
        assert_eq!(m.point("b15").unwrap().sentinels, vec![0xFFFF]);
        // Signed sentinels.
        let m = RegisterMap::from_toml_str(
            "ok.toml",
            &with_head("[[point]]\nname = \"s\"\ntable = \"input\"\naddress = 0\ntype = \"i32\"\nsentinels = [-1, 0x80000000]\n"),
        )
        .unwrap();
        assert_eq!(m.points[0].sentinels, vec![0xFFFF_FFFF, 0x8000_0000]);
    }

    #[test]
    fn device_and_parse_errors() {
        let p = "[[point]]\nname = \"a\"\ntable = \"input\"\naddress = 0\ntype = \"u16\"\n";
        for (text, field) in [
            (format!("[device]\nmax_read_registers = 32\n{p}"), "name"),
            (
                format!("[device]\nname = \"t\"\nmax_read_registers = 126\n{p}"),
                "max_read_registers",
            ),
            (
                format!("[device]\nname = \"t\"\nmax_write_registers = 0\n{p}"),
                "max_write_registers",
            ),
            (
                format!("[device]\nname = \"t\"\ndefault_word_order = \"middle\"\n{p}"),
                "default_word_order",
            ),
            (
                format!("[device]\nname = \"t\"\naddress_base = -1\n{p}"),
                "address_base",
            ),
            (
                format!("[device]\nname = \"t\"\naddress_base = {{ inputs = 1 }}\n{p}"),
                "address_base.inputs",
            ),
            ("[device]\nname = \"t\"\n".to_string(), "point"),
            (p.to_string(), "device"),
        ] {
            match bad(&text) {
                MapError::Device { file, field: f, .. } => assert_eq!((file.as_str(), f.as_str()), ("bad.toml", field)),
                other => panic!("{field}: {other}"),
            }
        }
        // Syntax errors, unknown keys and wrong TOML types are parse errors naming the file and the line.
        for text in [
            with_head("[[point]]\nname = \"a\"\ntable = \"input\"\naddress = 0\ntype = \"u16\"\nscael = 0.1\n"),
            with_head("[[point]]\nname = \"a\"\ntable = \"input\"\naddress = \"zero\"\ntype = \"u16\"\n"),
            with_head("[[point]\n"),
            format!("{HEAD}colour = \"red\"\n"),
        ] {
            match bad(&text) {
                MapError::Parse { file, message } => {
                    assert_eq!(file, "bad.toml");
                    assert!(message.contains("line"), "{message}");
                }
                other => panic!("{other}"),
            }
        }
    }

    #[test]
    fn block_covers() {
        let b = ReadBlock {
            table: Table::Input,
            start: 10,
            count: 4,
        };
        let mut p = pt(Table::Input, 12, ValueType::F32);
        assert!(b.covers(&p));
        p.address = 13;
        assert!(!b.covers(&p));
        p.address = 9;
        assert!(!b.covers(&p));
        p.table = Table::Holding;
        p.address = 10;
        assert!(!b.covers(&p));
        let mut q = pt(Table::Input, u16::MAX, ValueType::U16);
        q.writable = false;
        assert_eq!(q.end(), 65536);
        assert!(ReadBlock {
            table: Table::Input,
            start: u16::MAX,
            count: 1
        }
        .covers(&q));
    }
}
