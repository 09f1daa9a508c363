package methods

import (
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/pfedmma/pfedmma/config"
)

var (
	mu       sync.RWMutex
	registry = map[string]Method{}
)

// Register adds a method (and its config section). Method packages call it
// from init; registering a name twice panics.
func Register(m Method) {
	name := m.Info().Name
	mu.Lock()
	defer mu.Unlock()
	if _, dup := registry[name]; dup {
		panic("methods: " + name + " registered twice")
	}
	registry[name] = m
	var defaults func() config.Section
	if m.DefaultConfig() != nil {
		defaults = m.DefaultConfig
	}
	config.RegisterMethod(name, defaults)
	config.RegisterDropLast(name, m.Info().Loader.DropsLast())
}

// Get returns a registered method; an unknown name is an error listing the
// registered ones.
func Get(name string) (Method, error) {
	mu.RLock()
	defer mu.RUnlock()
	m, ok := registry[name]
	if !ok {
		return nil, fmt.Errorf("unknown method %q (available: %s)", name, strings.Join(config.Methods(), ", "))
	}
	return m, nil
}

// All returns the registered methods in registration order.
func All() []Method {
	mu.RLock()
	defer mu.RUnlock()
	var out []Method
	for _, n := range config.Methods() {
		if m, ok := registry[n]; ok {
			out = append(out, m)
		}
	}
	return out
}

// Names lists the registered method names, sorted.
func Names() []string {
	mu.RLock()
	defer mu.RUnlock()
	out := make([]string, 0, len(registry))
	for n := range registry {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}
