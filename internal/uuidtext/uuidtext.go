// Package uuidtext writes a UUID's canonical text
// (xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx, lower case) without allocating:
// what uuid.UUID.String returns, appended to a buffer the caller keeps.
package uuidtext

const hexDigits = "0123456789abcdef"

// Append appends the canonical text of u to dst.
func Append(dst []byte, u [16]byte) []byte {
	for i, b := range u {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			dst = append(dst, '-')
		}
		dst = append(dst, hexDigits[b>>4], hexDigits[b&0xF])
	}
	return dst
}
