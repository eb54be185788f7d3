//! The dump formats before the current one, read and converted: each `vN` holds what format N
//! wrote, frozen, and how it becomes the next. Only read; nothing here is written any more.

pub(super) mod v1;
pub(super) mod v2;
pub(super) mod v3;
pub(super) mod v4;
pub(super) mod v5;
pub(super) mod v6;
pub(super) mod v7;
