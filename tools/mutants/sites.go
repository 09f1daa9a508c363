package main

import (
	"fmt"
	"go/ast"
	"go/token"
	"go/types"
	"path/filepath"
	"sort"
)

// Operator names, as go-gremlins names its default mutators (so the two
// tools' reports read alike).
const (
	opArithmetic = "ARITHMETIC_BASE"
	opBoundary   = "CONDITIONALS_BOUNDARY"
	opNegation   = "CONDITIONALS_NEGATION"
	opIncDec     = "INCREMENT_DECREMENT"
	opNegatives  = "INVERT_NEGATIVES"
)

// Mutant is one change of one operator at one place in the source.
type Mutant struct {
	ID       int      `json:"id"`
	File     string   `json:"file"`
	Line     int      `json:"line"`
	Col      int      `json:"col"`
	Operator string   `json:"operator"`
	From     string   `json:"from"`
	To       string   `json:"to"`
	Status   string   `json:"status"`
	Tests    []string `json:"tests,omitempty"`
	Reason   string   `json:"reason,omitempty"`
}

// Key identifies a mutant in a triage file: file:line:col operator from→to.
func (m *Mutant) Key() string {
	return fmt.Sprintf("%s:%d:%d %s %s->%s", m.File, m.Line, m.Col, m.Operator, m.From, m.To)
}

// site is one node the schemata rewrite, with the mutants it carries.
type site struct {
	node ast.Node
	kind siteKind
	op   token.Token
	ids  []int // one per mutant of the node, in the helper's argument order
}

type siteKind int

const (
	kindArith  siteKind = iota // X op Y, op in + - * / %
	kindOrder                  // X op Y, op in < <= > >=
	kindEqual                  // X == Y, X != Y
	kindIncDec                 // X++, X--
	kindNeg                    // -X
)

// arithmeticTo is ARITHMETIC_BASE's replacement of each operator.
var arithmeticTo = map[token.Token]token.Token{
	token.ADD: token.SUB, token.SUB: token.ADD, token.MUL: token.QUO, token.QUO: token.MUL, token.REM: token.MUL,
}

// boundaryTo and negationTo are the two conditional mutators'.
var (
	boundaryTo = map[token.Token]token.Token{token.LSS: token.LEQ, token.LEQ: token.LSS, token.GTR: token.GEQ, token.GEQ: token.GTR}
	negationTo = map[token.Token]token.Token{
		token.EQL: token.NEQ, token.NEQ: token.EQL, token.LSS: token.GEQ, token.GEQ: token.LSS, token.GTR: token.LEQ, token.LEQ: token.GTR,
	}
)

// findSites walks one file and returns its mutation sites, appending their
// mutants to *all (IDs are positions in *all).
func findSites(fset *token.FileSet, f *ast.File, info *types.Info, rel string, all *[]*Mutant) []*site {
	var sites []*site
	add := func(n ast.Node, kind siteKind, op token.Token, muts ...[3]string) {
		s := &site{node: n, kind: kind, op: op}
		p := fset.Position(n.Pos())
		if be, ok := n.(*ast.BinaryExpr); ok {
			p = fset.Position(be.OpPos)
		}
		for _, m := range muts {
			id := len(*all)
			*all = append(*all, &Mutant{ID: id, File: filepath.ToSlash(rel), Line: p.Line, Col: p.Column, Operator: m[0], From: m[1], To: m[2]})
			s.ids = append(s.ids, id)
		}
		sites = append(sites, s)
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.GenDecl:
			return n.Tok != token.CONST
		case *ast.BinaryExpr:
			if constant(info, n) {
				return true
			}
			switch {
			case arithmeticTo[n.Op] != 0 && numeric(info.TypeOf(n)):
				add(n, kindArith, n.Op, [3]string{opArithmetic, n.Op.String(), arithmeticTo[n.Op].String()})
			case boundaryTo[n.Op] != 0 && ordered(info.TypeOf(n.X)) && ordered(info.TypeOf(n.Y)):
				add(n, kindOrder, n.Op,
					[3]string{opBoundary, n.Op.String(), boundaryTo[n.Op].String()},
					[3]string{opNegation, n.Op.String(), negationTo[n.Op].String()})
			case n.Op == token.EQL || n.Op == token.NEQ:
				add(n, kindEqual, n.Op, [3]string{opNegation, n.Op.String(), negationTo[n.Op].String()})
			}
		case *ast.IncDecStmt:
			if numeric(info.TypeOf(n.X)) && addressable(n.X, info) {
				to := token.DEC
				if n.Tok == token.DEC {
					to = token.INC
				}
				add(n, kindIncDec, n.Tok, [3]string{opIncDec, n.Tok.String(), to.String()})
			}
		case *ast.UnaryExpr:
			if n.Op == token.SUB && !constant(info, n) && numeric(info.TypeOf(n)) {
				add(n, kindNeg, n.Op, [3]string{opNegatives, "-", "+"})
			}
		}
		return true
	})
	sort.SliceStable(sites, func(i, j int) bool {
		a, b := sites[i].node, sites[j].node
		if a.Pos() != b.Pos() {
			return a.Pos() < b.Pos()
		}
		return a.End() > b.End()
	})
	return sites
}

// constant reports whether e has a constant value (it may sit where Go
// needs a constant, and a constant expression is folded by the compiler).
func constant(info *types.Info, e ast.Expr) bool {
	tv, ok := info.Types[e]
	return !ok || tv.Value != nil
}

// numeric reports whether t is an integer or floating-point type (not a
// string: + concatenates).
func numeric(t types.Type) bool {
	if t == nil {
		return false
	}
	b, ok := t.Underlying().(*types.Basic)
	return ok && b.Info()&(types.IsInteger|types.IsFloat) != 0
}

// ordered reports whether t is a numeric or string type (cmp.Ordered).
func ordered(t types.Type) bool {
	if t == nil {
		return false
	}
	b, ok := t.Underlying().(*types.Basic)
	return ok && b.Info()&(types.IsInteger|types.IsFloat|types.IsString) != 0
}

// addressable reports whether &x is valid Go for the operand of an
// increment: a variable, a field of one, a slice or array element, a
// dereference — not a map element.
func addressable(x ast.Expr, info *types.Info) bool {
	switch x := x.(type) {
	case *ast.Ident:
		return true
	case *ast.ParenExpr:
		return addressable(x.X, info)
	case *ast.SelectorExpr:
		return true
	case *ast.StarExpr:
		return true
	case *ast.IndexExpr:
		t := info.TypeOf(x.X)
		if t == nil {
			return false
		}
		_, isMap := t.Underlying().(*types.Map)
		return !isMap
	}
	return false
}
