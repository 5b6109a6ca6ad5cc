package envelope

import (
	"errors"
	"fmt"
)

// The error sentinels shared by every herald package. Match them with
// errors.Is; the message around them names the model, field, option or
// argument at fault.
var (
	// ErrValidation marks a bad argument or value: an empty topic, a payload
	// that has no JSON form, an extension key that collides with an envelope
	// key. Nothing is written when it is returned.
	ErrValidation = errors.New("herald: validation failed")

	// ErrConfiguration marks a bad declaration found at registration or
	// construction time: an unknown template name, Fields together with
	// Exclude, a relay option out of range.
	ErrConfiguration = errors.New("herald: invalid configuration")

	// ErrUnsupported marks a dialect or feature the database lacks.
	ErrUnsupported = errors.New("herald: unsupported")
)

// Error is the typed error behind ErrValidation, ErrConfiguration and
// ErrUnsupported: Where names the argument, field, option or model at fault
// ("Message[2].Topic", "Options.Fields", "library.Loan"), Err is the cause.
type Error struct {
	Kind  error  // ErrValidation, ErrConfiguration or ErrUnsupported
	Where string // what is at fault
	Msg   string // what is wrong with it, and how to fix it where that helps
	Err   error  // the underlying cause, or nil
}

func (e *Error) Error() string {
	s := "herald: " + e.Where + ": " + e.Msg
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns the kind sentinel and the cause, so errors.Is matches both.
func (e *Error) Unwrap() []error {
	if e.Err == nil {
		return []error{e.Kind}
	}
	return []error{e.Kind, e.Err}
}

// Validationf returns an ErrValidation error about where.
func validationf(where, format string, args ...any) error {
	return &Error{Kind: ErrValidation, Where: where, Msg: fmt.Sprintf(format, args...)}
}

// Configurationf returns an ErrConfiguration error about where.
func configurationf(where, format string, args ...any) error {
	return &Error{Kind: ErrConfiguration, Where: where, Msg: fmt.Sprintf(format, args...)}
}

// wrapValidation returns an ErrValidation error about where with cause err.
func wrapValidation(where, msg string, err error) error {
	return &Error{Kind: ErrValidation, Where: where, Msg: msg, Err: err}
}
