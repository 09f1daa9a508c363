package runfiles

import _ "github.com/pfedmma/pfedmma/methods/all" // run.json names registered methods
