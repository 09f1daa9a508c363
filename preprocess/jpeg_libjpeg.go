//go:build cgo && !purego

package preprocess

/*
#cgo LDFLAGS: -ljpeg
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <setjmp.h>
#include <jpeglib.h>
#include <jerror.h>

#define PJ_STR2(x) #x
#define PJ_STR(x) PJ_STR2(x)
static const char *pj_version(void) {
#ifdef LIBJPEG_TURBO_VERSION
	return "libjpeg-turbo " PJ_STR(LIBJPEG_TURBO_VERSION);
#else
	return "libjpeg " PJ_STR(JPEG_LIB_VERSION);
#endif
}

// A progressive JPEG can hold any number of scans, each rereading the whole
// coefficient buffer; cap them as libjpeg-turbo's own fuzzers do (djpeg
// -maxscans) so that a small hostile file cannot take minutes.
#define PJ_MAX_SCANS 1000

typedef struct {
	struct jpeg_decompress_struct cinfo;
	struct jpeg_error_mgr jerr;
	struct jpeg_progress_mgr prog;
	jmp_buf jb;
	char msg[JMSG_LENGTH_MAX];
	int truncated;
	int created;
	unsigned char *data;
} pj_ctx;

// libjpeg's default error_exit calls exit(): jump back to the entry point
// that set jb instead, with the message kept for Go.
static void pj_error_exit(j_common_ptr c) {
	pj_ctx *p = (pj_ctx *)c->client_data;
	(*c->err->format_message)(c, p->msg);
	longjmp(p->jb, 1);
}

// Warnings are not printed (PIL ignores them too), but running out of data
// means a truncated file, which PIL refuses ("image file is truncated").
static void pj_emit_message(j_common_ptr c, int level) {
	pj_ctx *p = (pj_ctx *)c->client_data;
	if (level < 0) {
		if (c->err->msg_code == JWRN_JPEG_EOF) {
			p->truncated = 1;
		}
		c->err->num_warnings++;
	}
}

static void pj_progress(j_common_ptr c) {
	pj_ctx *p = (pj_ctx *)c->client_data;
	if (c->is_decompressor && ((j_decompress_ptr)c)->input_scan_number > PJ_MAX_SCANS) {
		snprintf(p->msg, sizeof p->msg, "more than %d scans", PJ_MAX_SCANS);
		longjmp(p->jb, 1);
	}
}

// pj_header creates the decompressor on data (n bytes, owned by p from now
// on) and reads the header. It returns 0, or -1 with p->msg set.
static int pj_header(pj_ctx *p, unsigned char *data, unsigned long n) {
	p->data = data;
	p->cinfo.err = jpeg_std_error(&p->jerr);
	p->jerr.error_exit = pj_error_exit;
	p->jerr.emit_message = pj_emit_message;
	p->cinfo.client_data = p;
	if (setjmp(p->jb)) {
		return -1;
	}
	jpeg_create_decompress(&p->cinfo);
	p->created = 1;
	p->prog.progress_monitor = pj_progress;
	p->cinfo.progress = &p->prog;
	jpeg_mem_src(&p->cinfo, data, n);
	jpeg_read_header(&p->cinfo, TRUE);
	if (p->truncated) {
		snprintf(p->msg, sizeof p->msg, "truncated file (premature end of data in the header)");
		return -1;
	}
	return 0;
}

// pj_decode decodes the image into out (rows of stride bytes) in colour
// space cs with PIL's settings: islow IDCT, fancy upsampling, no scaling.
// It returns 0, or -1 with p->msg set.
static int pj_decode(pj_ctx *p, unsigned char *out, size_t stride, int cs, int ncomp) {
	JSAMPROW rows[16];
	if (setjmp(p->jb)) {
		return -1;
	}
	p->cinfo.out_color_space = (J_COLOR_SPACE)cs;
	p->cinfo.dct_method = JDCT_ISLOW;
	p->cinfo.do_fancy_upsampling = TRUE;
	p->cinfo.scale_num = 1;
	p->cinfo.scale_denom = 1;
	jpeg_start_decompress(&p->cinfo);
	if (p->cinfo.output_width != p->cinfo.image_width || p->cinfo.output_height != p->cinfo.image_height ||
			p->cinfo.output_components != ncomp) {
		snprintf(p->msg, sizeof p->msg, "decoder output %ux%u×%d, want %ux%u×%d",
			p->cinfo.output_width, p->cinfo.output_height, p->cinfo.output_components,
			p->cinfo.image_width, p->cinfo.image_height, ncomp);
		return -1;
	}
	while (p->cinfo.output_scanline < p->cinfo.output_height) {
		JDIMENSION y = p->cinfo.output_scanline;
		int k = 0;
		for (; k < 16 && y + k < p->cinfo.output_height; k++) {
			rows[k] = out + (size_t)(y + k) * stride;
		}
		jpeg_read_scanlines(&p->cinfo, rows, k);
		if (p->truncated) {
			snprintf(p->msg, sizeof p->msg, "truncated file (premature end of data at row %u of %u)",
				p->cinfo.output_scanline, p->cinfo.output_height);
			return -1;
		}
	}
	// Like PIL, stop once every row is out: what follows (up to EOI) is not read.
	return 0;
}

static void pj_free(pj_ctx *p) {
	if (p->created) {
		jpeg_destroy_decompress(&p->cinfo);
	}
	free(p->data);
	free(p);
}

static pj_ctx *pj_new(void) { return (pj_ctx *)calloc(1, sizeof(pj_ctx)); }
static unsigned pj_width(pj_ctx *p) { return p->cinfo.image_width; }
static unsigned pj_height(pj_ctx *p) { return p->cinfo.image_height; }
static int pj_components(pj_ctx *p) { return p->cinfo.num_components; }
static int pj_colorspace(pj_ctx *p) { return (int)p->cinfo.jpeg_color_space; }
*/
import "C"

import (
	"errors"
	"fmt"
	"image"
	"unsafe"
)

// JPEGExact reports whether JPEG files are decoded bit-exactly as PIL decodes
// them (libjpeg-turbo with PIL's settings): true in the default cgo build,
// false in the purego build, which uses Go's image/jpeg.
const JPEGExact = true

// JPEGDecoder names the JPEG decoder this build uses, e.g.
// "libjpeg-turbo 2.1.5" (the version of the headers it was built against).
func JPEGDecoder() string { return C.GoString(C.pj_version()) }

// decodeJPEG decodes a JPEG file's bytes with libjpeg-turbo exactly as PIL
// opens and loads it: 1 component → *image.Gray (mode "L"); Y'CbCr or RGB →
// 3-channel RGB (mode "RGB", libjpeg's islow IDCT and fancy upsampling);
// CMYK or YCCK → *image.CMYK holding 255 minus libjpeg's output, PIL's
// "CMYK;I" raw mode, which PIL applies to every 4-component JPEG (it assumes
// Adobe's inverted convention). The header's size is checked against
// MaxPixels before any pixel memory is allocated. Corrupt or truncated data
// gives an error; libjpeg never exits the process.
func decodeJPEG(data []byte) (image.Image, error) {
	if len(data) == 0 {
		return nil, errors.New("jpeg: empty file")
	}
	p := C.pj_new()
	if p == nil {
		return nil, errors.New("jpeg: out of memory")
	}
	defer C.pj_free(p)
	// libjpeg keeps a pointer to its input between calls: give it C memory.
	if C.pj_header(p, (*C.uchar)(C.CBytes(data)), C.ulong(len(data))) != 0 {
		return nil, fmt.Errorf("jpeg: %s", C.GoString(&p.msg[0]))
	}
	w, h := int(C.pj_width(p)), int(C.pj_height(p))
	if err := checkSize("jpeg", w, h); err != nil {
		return nil, err
	}
	nc, cs := int(C.pj_components(p)), C.pj_colorspace(p)
	r := image.Rect(0, 0, w, h)
	var (
		pix    []uint8
		outCS  C.int
		outN   int
		result image.Image
	)
	switch {
	case nc == 1 && cs == C.JCS_GRAYSCALE:
		m := image.NewGray(r)
		pix, outCS, outN, result = m.Pix, C.JCS_GRAYSCALE, 1, m
	case nc == 3 && (cs == C.JCS_YCbCr || cs == C.JCS_RGB):
		m := &rgbImage{RGB{W: w, H: h, Pix: make([]uint8, 3*w*h)}}
		pix, outCS, outN, result = m.Pix, C.JCS_RGB, 3, m
	case nc == 4 && (cs == C.JCS_CMYK || cs == C.JCS_YCCK):
		m := image.NewCMYK(r)
		pix, outCS, outN, result = m.Pix, C.JCS_CMYK, 4, m
	default:
		return nil, fmt.Errorf("jpeg: unsupported %d-component image (colour space %d)", nc, int(cs))
	}
	if C.pj_decode(p, (*C.uchar)(unsafe.Pointer(&pix[0])), C.size_t(outN*w), outCS, C.int(outN)) != 0 {
		return nil, fmt.Errorf("jpeg: %s", C.GoString(&p.msg[0]))
	}
	if outN == 4 {
		for i := range pix {
			pix[i] = 255 - pix[i]
		}
	}
	return result, nil
}
