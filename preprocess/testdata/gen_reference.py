import json, struct, sys, os, numpy as np
from PIL import Image, features
print("webp", features.check("webp"), "jpeg", features.version("jpg"), "webp v", features.version("webp"))
MEAN = np.array([0.48145466, 0.4578275, 0.40821073], dtype=np.float32)
STD = np.array([0.26862954, 0.26130258, 0.27577711], dtype=np.float32)

def clip_transform(img, n, rgb_first=False, resample=Image.BICUBIC):
    if rgb_first:
        img = img.convert("RGB")
    w, h = img.size
    short, long = (w, h) if w <= h else (h, w)
    ns, nl = n, int(n * long / short)
    nw, nh = (ns, nl) if w <= h else (nl, ns)
    if (nw, nh) != (w, h):
        img = img.resize((nw, nh), resample)
    top = int(round((nh - n) / 2.0)); left = int(round((nw - n) / 2.0))
    img = img.crop((left, top, left + n, top + n))
    img = img.convert("RGB")
    a = np.asarray(img, dtype=np.uint8).astype(np.float32) / np.float32(255)
    a = (a - MEAN) / STD
    return a.transpose(2, 0, 1).astype(np.float32)

def write_st(path, tensors, meta):
    hdr = {}; off = 0; blobs = []
    for k in sorted(tensors):
        b = np.ascontiguousarray(tensors[k], dtype="<f4").tobytes()
        hdr[k] = {"dtype": "F32", "shape": list(tensors[k].shape), "data_offsets": [off, off + len(b)]}
        off += len(b); blobs.append(b)
    hdr["__metadata__"] = meta
    h = json.dumps(hdr).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h))); f.write(h)
        for b in blobs: f.write(b)

if sys.argv[1] == "check":
    # reproduce the shared fixture
    d = "/work/main/testdata/preprocess"
    b = open(d + "/expected.safetensors", "rb").read()
    n = struct.unpack("<Q", b[:8])[0]; hdr = json.loads(b[8:8+n])
    for k, v in hdr.items():
        if k == "__metadata__": continue
        ref = np.frombuffer(b[8+n+v["data_offsets"][0]:8+n+v["data_offsets"][1]], dtype="<f4").reshape(v["shape"])
        got = clip_transform(Image.open(os.path.join(d, k)), 224)
        print(k, np.abs(got - ref).max())

if sys.argv[1] == "make":
    out = sys.argv[2]; os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(7)
    def scene(w, h):
        y, x = np.mgrid[0:h, 0:w].astype(np.float32)
        r = 127 + 100 * np.sin(x / 7.0) * np.cos(y / 11.0)
        g = 255 * x / max(w - 1, 1)
        b = np.where(((x // 9 + y // 7) % 2) == 0, 230, 20).astype(np.float32)
        a = np.stack([r, g, b], -1) + rng.normal(0, 12, (h, w, 3))
        return np.clip(a, 0, 255).astype(np.uint8)
    S = 40
    cases = {}  # file -> (rgb_first, resample)
    def save(name, img, rgb_first=False, **kw):
        img.save(os.path.join(out, name), **kw); cases[name] = rgb_first
    rgb = Image.fromarray(scene(97, 71))
    save("jpeg444.jpg", rgb, quality=90, subsampling=0)
    save("jpeg422.jpg", rgb, quality=90, subsampling=1)
    save("jpeg420_odd.jpg", Image.fromarray(scene(77, 51)), quality=85, subsampling=2)
    save("gray.jpg", rgb.convert("L"), quality=90)
    save("rgb.bmp", Image.fromarray(scene(45, 60)))
    save("palette.png", rgb.quantize(200))
    save("anim.gif", Image.fromarray(scene(50, 37)).quantize(64))
    ga = Image.fromarray(scene(63, 80)).convert("L")
    alpha = Image.fromarray(np.tile(np.linspace(0, 255, 63).astype(np.uint8), (80, 1)))
    save("gray_alpha.png", Image.merge("LA", (ga, alpha)))
    save("lossy.webp", Image.fromarray(scene(91, 66)), quality=75)
    save("lossy_odd.webp", Image.fromarray(scene(37, 29)), quality=60)
    rgba = Image.fromarray(scene(58, 44)).convert("RGBA"); rgba.putalpha(Image.fromarray((np.indices((44, 58)).sum(0) * 2 % 256).astype(np.uint8)))
    save("lossy_alpha.webp", rgba, quality=70)
    save("lossless.webp", Image.fromarray(scene(33, 47)), lossless=True)
    save("tiny_upscale.png", Image.fromarray(scene(13, 9)))
    save("extreme_wide.png", Image.fromarray(scene(300, 20)))
    # Added later (after the draws above, so the earlier images are unchanged):
    save("cmyk.jpg", Image.fromarray(scene(83, 57)).convert("CMYK"), quality=90)
    save("bilevel_odd.png", Image.fromarray(scene(61, 43)).convert("L").convert("1"))
    save("palette_tiny.png", Image.fromarray(scene(13, 9)).quantize(16))
    # GIF with a transparent index (PIL keeps that entry's palette colour) and
    # one whose first frame is smaller than the screen, at an offset (PIL fills
    # the rest of the screen with the transparent index, else 0): the same
    # pixel data with the logical screen and the descriptor's offset patched.
    tg = Image.fromarray(scene(45, 33)).quantize(32)
    tg.save(os.path.join(out, "trans.gif"))  # reopened: Pillow 9.4 drops transparency= on a fresh quantize()
    save("trans.gif", Image.open(os.path.join(out, "trans.gif")), transparency=3)
    b = bytearray(open(os.path.join(out, "trans.gif"), "rb").read())
    struct.pack_into("<HH", b, 6, 60, 50)
    d = b.index(b"\x2c", 13 + 3 * 32 + 8)  # image descriptor after the colour table and the 8-byte GCE
    assert struct.unpack_from("<HHHH", b, d + 1) == (0, 0, 45, 33), struct.unpack_from("<HHHH", b, d + 1)
    struct.pack_into("<HH", b, d + 1, 7, 9)
    open(os.path.join(out, "offset.gif"), "wb").write(bytes(b)); cases["offset.gif"] = False
    tensors = {}
    for name, rgb_first in cases.items():
        tensors[name] = clip_transform(Image.open(os.path.join(out, name)), S, rgb_first)
        print(name, Image.open(os.path.join(out, name)).mode, Image.open(os.path.join(out, name)).size)
    # bilinear variant of one file (CIFAR pipeline uses PIL BILINEAR)
    

    tensors["bilinear:rgb.bmp"] = clip_transform(Image.open(os.path.join(out, "rgb.bmp")), S, False, Image.BILINEAR)

    write_st(os.path.join(out, "expected.safetensors"), tensors, {
        "generator": "Pillow 9.4.0 (Debian 12 python3-pil, libjpeg-turbo 2.1.5, libwebp 1.2.4) + numpy; torchvision 0.14 Resize/CenterCrop rules",
        "size": str(S),
        "note": "CLIP order (resize, crop, convert RGB); P and 1 images resized with NEAREST as PIL forces"})
