// The byte address of (x, y) (x in bytes, y in rows) inside one tiled plane: the mirror of
// interop/src/tiling/address.rs (PlaneAddress::offset), shared by tile.comp and colour.comp
// so that detiling and fused detile+colour cannot disagree. Tile sizes are powers of two
// for every layout, so they arrive as log2 and the address needs no integer division
// (lavapipe has no SIMD divide and scalarises it).

struct TiledPlane {
    uint kind;     // AddressKind: 0 linear, 1 row-major tiles, 2 i915-y, 3 samsung z-flip-z, 4 nvidia block
    uint twl;      // log2 of the tile width in bytes
    uint thl;      // log2 of the tile height in rows
    uint tiles_x;
    uint tiles_y;
    uint pitch;    // bytes per row when kind == 0
};

uint zflipz_tile_index(uint tx, uint ty, uint tiles_x, uint tiles_y) {
    uint index = (ty & ~1u) * tiles_x + tx;
    if ((ty & 1u) == 1u) {
        index += 2u + (tx & ~3u);
    } else if ((tiles_y & 1u) == 0u || ty != tiles_y - 1u) {
        index += (tx + 2u) & ~3u;
    }
    return index;
}

uint nvidia_gob_offset(uint x, uint y) {
    return ((x & 63u) >> 5) * 256u + ((y & 7u) >> 1) * 64u + ((x & 31u) >> 4) * 32u
         + (y & 1u) * 16u + (x & 15u);
}

uint plane_address(TiledPlane p, uint x, uint y) {
    if (p.kind == 0u) {
        return y * p.pitch + x;
    }
    uint tx = x >> p.twl, ty = y >> p.thl;
    uint ix = x & ((1u << p.twl) - 1u), iy = y & ((1u << p.thl) - 1u);
    uint tile_index = ty * p.tiles_x + tx;
    uint inner = (iy << p.twl) + ix;
    if (p.kind == 2u) {
        inner = (ix >> 4) * 512u + iy * 16u + (ix & 15u);
    } else if (p.kind == 3u) {
        tile_index = zflipz_tile_index(tx, ty, p.tiles_x, p.tiles_y);
    } else if (p.kind == 4u) {
        inner = (iy >> 3) * 512u + nvidia_gob_offset(ix, iy);
    }
    return (tile_index << (p.twl + p.thl)) + inner;
}
