package deploy

import (
	"slices"
	"strings"
	"testing"
)

func TestParseClients(t *testing.T) {
	for spec, want := range map[string][]int{
		"0-4":        {0, 1, 2, 3, 4},
		"7":          {7},
		"0-2,20,5-6": {0, 1, 2, 5, 6, 20},
		" 3 - 4 , 9": {3, 4, 9},
	} {
		got, err := ParseClients(spec)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("ParseClients(%q) = %v, %v; want %v", spec, got, err, want)
		}
	}
	for spec, why := range map[string]string{
		"":             "empty",
		"4-2":          "backwards",
		"a":            `"a" is not a client number`,
		"1-":           `"" is not a client number`,
		"-3":           `"" is not a client number`,
		"0-3,2":        "client 2 is listed twice",
		"1,,2":         "not a client number",
		"0-9999999999": "too long",
	} {
		_, err := ParseClients(spec)
		if err == nil || !strings.Contains(err.Error(), "--clients") || !strings.Contains(err.Error(), why) {
			t.Errorf("ParseClients(%q): %v; want an error naming --clients and %q", spec, err, why)
		}
	}
}
