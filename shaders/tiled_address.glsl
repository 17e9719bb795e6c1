// The byte address of (x, y) (x in bytes, y in rows) inside one tiled plane: the mirror of
// interop/src/tiling/address.rs (PlaneAddress::offset), shared by tile.comp and colour.comp
// so that detiling and fused detile+colour cannot disagree. Tile sizes are powers of two
// for every layout, so they arrive as log2 and the address needs no integer division
// (lavapipe has no SIMD divide and scalarises it).

// AddressKind (interop/src/tiling/address.rs): each variant's discriminant, named as the
// variant in capitals; interop's tile_layout tests read these lines and fail when they differ.
const uint KIND_LINEAR = 0u;
const uint KIND_ROW_MAJOR_TILES = 1u;
const uint KIND_I915_Y = 2u;
const uint KIND_SAMSUNG_Z_FLIP_Z = 3u;
const uint KIND_NVIDIA_BLOCK = 4u;
#ifdef DMABRIDGE_TEST_LAYOUT
const uint KIND_INTERLACED_TILES = 5u;
#endif

struct TiledPlane {
    uint kind;     // one of the KIND_ constants above
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
    if (p.kind == KIND_LINEAR) {
        return y * p.pitch + x;
    }
    uint tx = x >> p.twl, ty = y >> p.thl;
    uint ix = x & ((1u << p.twl) - 1u), iy = y & ((1u << p.thl) - 1u);
    uint tile_index = ty * p.tiles_x + tx;
    uint inner = (iy << p.twl) + ix;
    if (p.kind == KIND_I915_Y) {
        inner = (ix >> 4) * 512u + iy * 16u + (ix & 15u);
    } else if (p.kind == KIND_SAMSUNG_Z_FLIP_Z) {
        tile_index = zflipz_tile_index(tx, ty, p.tiles_x, p.tiles_y);
    } else if (p.kind == KIND_NVIDIA_BLOCK) {
        inner = (iy >> 3) * 512u + nvidia_gob_offset(ix, iy);
    }
#ifdef DMABRIDGE_TEST_LAYOUT
    else if (p.kind == KIND_INTERLACED_TILES) {
        uint row = (iy & 1u) == 0u ? iy >> 1 : (1u << (p.thl - 1u)) + (iy >> 1);
        inner = (row << p.twl) + ix;
    }
#endif
    return (tile_index << (p.twl + p.thl)) + inner;
}
