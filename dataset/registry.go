package dataset

import (
	"errors"
	"fmt"
	"slices"
	"sync"
)

// LoaderFunc loads a dataset from the DATA root.
type LoaderFunc func(root string, opts Options) (*Dataset, error)

// ErrUnknown is returned by [Load] for a name no loader is registered under.
var ErrUnknown = errors.New("unknown dataset")

var (
	registryMu sync.RWMutex
	registry   = map[string]LoaderFunc{}
)

func init() {
	for name, f := range map[string]LoaderFunc{
		"caltech101":       coopLoader(coopCaltech101),
		"oxford_pets":      coopLoader(coopOxfordPets),
		"oxford_flowers":   coopLoader(coopOxfordFlowers),
		"food101":          coopLoader(coopFood101),
		"dtd":              coopLoader(coopDTD),
		"sun397":           coopLoader(coopSUN397),
		"ucf101":           coopLoader(coopUCF101),
		"cifar10":          LoadCIFAR10,
		"cifar100":         LoadCIFAR100,
		"domainnet":        loadDomainNetAny,
		"office_caltech10": LoadOfficeCaltech10,
		"imagefolder":      LoadImageFolder,
		"fashion_mnist":    LoadFashionMNIST,
	} {
		registry[name] = f
	}
}

// Register adds a loader under name, so that [Load] can find it. It fails if
// the name is empty, f is nil, or the name is taken.
func Register(name string, f LoaderFunc) error {
	if name == "" || f == nil {
		return fmt.Errorf("dataset: register %q: empty name or nil loader", name)
	}
	registryMu.Lock()
	defer registryMu.Unlock()
	if _, ok := registry[name]; ok {
		return fmt.Errorf("dataset: register %q: name already registered", name)
	}
	registry[name] = f
	return nil
}

// Names lists the registered dataset names, sorted.
func Names() []string {
	registryMu.RLock()
	defer registryMu.RUnlock()
	names := make([]string, 0, len(registry))
	for n := range registry {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Load reads the dataset registered under name from root, fills Val from
// Train when [Options.ValFraction] asks for it, and validates the result.
func Load(name, root string, opts Options) (*Dataset, error) {
	registryMu.RLock()
	f, ok := registry[name]
	registryMu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("dataset %q: %w (known: %v)", name, ErrUnknown, Names())
	}
	d, err := f(root, opts)
	if err != nil {
		return nil, err
	}
	if d == nil {
		return nil, fmt.Errorf("dataset %q: loader returned no dataset", name)
	}
	if d.Name == "" {
		d.Name = name
	}
	if len(d.Domains) == 0 {
		d.Domains = []string{d.Name}
	}
	if len(d.Val) == 0 && opts.ValFraction > 0 {
		if opts.ValFraction >= 1 {
			return nil, fmt.Errorf("dataset %q: dataset.val_fraction %g outside (0, 1)", name, opts.ValFraction)
		}
		d.Train, d.Val = carveVal(d.Train, opts.ValFraction, opts.Seed)
	}
	if err := d.Validate(); err != nil {
		return nil, err
	}
	return d, nil
}
