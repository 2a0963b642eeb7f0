pub use serde;
