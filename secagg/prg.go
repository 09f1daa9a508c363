package secagg

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/sha256"
	"encoding/binary"
)

// kdf derives a 32-byte key from a label, the round's session, two site
// IDs and secret material (SHA-256 with length-free fixed-size fields).
func kdf(label string, session [32]byte, a, b int, material []byte) [32]byte {
	h := sha256.New()
	h.Write([]byte("pfedmma/secagg/" + label + "\x00"))
	h.Write(session[:])
	var ids [16]byte
	binary.LittleEndian.PutUint64(ids[:8], uint64(a))
	binary.LittleEndian.PutUint64(ids[8:], uint64(b))
	h.Write(ids[:])
	h.Write(material)
	var out [32]byte
	h.Sum(out[:0])
	return out
}

// pairSeed is the seed of the pairwise mask between sites a and b, from
// their X25519 agreement (symmetric: the lower ID first).
func pairSeed(session [32]byte, a, b int, shared []byte) [32]byte {
	if a > b {
		a, b = b, a
	}
	return kdf("pair", session, a, b, shared)
}

// commit is the commitment to a self-mask seed that a site advertises.
func commit(session [32]byte, id int, seed [32]byte) [32]byte {
	return kdf("commit", session, id, id, seed[:])
}

// prgStream expands seed with AES-256-CTR (zero IV): n uniform 64-bit words.
func prgStream(seed [32]byte, n int) []uint64 {
	block, err := aes.NewCipher(seed[:])
	if err != nil {
		panic("secagg: aes with a 32-byte key: " + err.Error()) // unreachable: the key size is fixed
	}
	buf := make([]byte, 8*n)
	cipher.NewCTR(block, make([]byte, aes.BlockSize)).XORKeyStream(buf, buf)
	out := make([]uint64, n)
	for i := range out {
		out[i] = binary.LittleEndian.Uint64(buf[8*i:])
	}
	return out
}

// addMask adds (sign +1) or subtracts (−1) PRG(seed) to y in Z_2^64.
func addMask(y []uint64, seed [32]byte, sign int) {
	m := prgStream(seed, len(y))
	if sign >= 0 {
		for i, v := range m {
			y[i] += v
		}
		return
	}
	for i, v := range m {
		y[i] -= v
	}
}
