//! What both charts share: the SVG drawing area and their meshes' fonts
//! and grid lines.

use plotters::chart::MeshStyle;
use plotters::coord::ranged1d::ValueFormatter;
use plotters::coord::Shift;
use plotters::prelude::*;

pub(super) type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;

/// Fonts and grid lines of every chart's mesh.
pub(super) fn house_style<'m, 'a, 'b, X, Y, XT, YT, DB>(
    mesh: &'m mut MeshStyle<'a, 'b, X, Y, DB>,
) -> &'m mut MeshStyle<'a, 'b, X, Y, DB>
where
    X: Ranged<ValueType = XT> + ValueFormatter<XT>,
    Y: Ranged<ValueType = YT> + ValueFormatter<YT>,
    DB: DrawingBackend,
{
    mesh.label_style(("sans-serif", 15))
        .axis_desc_style(("sans-serif", 16))
        .bold_line_style(BLACK.mix(0.12))
        .light_line_style(BLACK.mix(0.04))
}
