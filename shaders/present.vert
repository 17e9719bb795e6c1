#version 450
// A triangle that covers the viewport (the fitted rectangle the presenter sets), with
// texture coordinates 0..1 across it: no vertex buffer. Vulkan's clip space has +y down,
// so uv (0,0) is the frame's top-left texel.
layout(location = 0) out vec2 uv;

void main() {
    vec2 p = vec2(float((gl_VertexIndex << 1) & 2), float(gl_VertexIndex & 2));
    uv = p;
    gl_Position = vec4(p * 2.0 - 1.0, 0.0, 1.0);
}
