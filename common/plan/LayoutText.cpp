//===- LayoutText.cpp - a tensor's sharding as text -----------------------===//

#include "common/plan/LayoutText.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/raw_ostream.h"

using namespace tessera::planner;

namespace {

/// Shape text "[256, 64]".
std::string shapeText(llvm::ArrayRef<int64_t> shape) {
  std::string s = "[";
  for (auto [i, d] : llvm::enumerate(shape))
    s += (i ? ", " : "") + std::to_string(d);
  return s + "]";
}

/// A recursive-descent parser over `text`; errors name the 1-based column.
class Parser {
public:
  Parser(llvm::StringRef text, llvm::ArrayRef<int64_t> shape,
         const GridSpec *grid)
      : text(text), shape(shape), grid(grid) {}

  llvm::Expected<TensorLayout> parse() {
    skipBlanks();
    if (consumeWord("replicated")) {
      skipBlanks();
      if (pos != text.size())
        return error("unexpected '" + rest() + "' after 'replicated'");
      return TensorLayout::replicatedOf(shape);
    }
    if (!consume('['))
      return error("expected '[' or 'replicated'");
    TensorLayout layout;
    skipBlanks();
    if (!consume(']')) {
      do {
        if (layout.dims.size() == shape.size())
          return error("more dims than the tensor's rank " +
                       llvm::Twine(shape.size()) + " (shape " +
                       shapeText(shape) + ")");
        auto dim = parseDim(layout.dims.size());
        if (!dim)
          return dim.takeError();
        layout.dims.push_back(std::move(*dim));
        skipBlanks();
      } while (consume(','));
      if (!consume(']'))
        return error("expected ',' or ']'");
    }
    skipBlanks();
    if (pos != text.size())
      return error("unexpected '" + rest() + "' after the layout");
    if (layout.dims.size() != shape.size())
      return fail("the layout has rank " + llvm::Twine(layout.dims.size()) +
                  " but the tensor has rank " + llvm::Twine(shape.size()) +
                  " (shape " + shapeText(shape) + ")");
    return layout;
  }

private:
  llvm::StringRef text;
  llvm::ArrayRef<int64_t> shape;
  const GridSpec *grid;
  size_t pos = 0;
  std::vector<std::string> used; // axes seen so far

  static llvm::Error fail(const llvm::Twine &msg) {
    return llvm::createStringError(llvm::inconvertibleErrorCode(), msg);
  }
  llvm::Error error(const llvm::Twine &msg) const {
    return fail("column " + llvm::Twine(pos + 1) + ": " + msg);
  }
  std::string rest() const { return text.drop_front(pos).str(); }
  void skipBlanks() {
    while (pos < text.size() && llvm::isSpace(text[pos]))
      ++pos;
  }
  bool consume(char c) {
    skipBlanks();
    if (pos < text.size() && text[pos] == c) {
      ++pos;
      return true;
    }
    return false;
  }
  static bool isNameStart(char c) { return llvm::isAlpha(c) || c == '_'; }
  static bool isNameChar(char c) { return llvm::isAlnum(c) || c == '_'; }
  bool consumeWord(llvm::StringRef word) {
    llvm::StringRef rest = text.drop_front(pos);
    if (!rest.starts_with(word) ||
        (rest.size() > word.size() && isNameChar(rest[word.size()])))
      return false;
    pos += word.size();
    return true;
  }

  /// axes := NAME ("*" NAME)*; checks each against the grid and that none
  /// was used before.
  llvm::Expected<std::vector<std::string>> parseAxes() {
    std::vector<std::string> axes;
    do {
      skipBlanks();
      size_t start = pos;
      if (pos >= text.size() || !isNameStart(text[pos]))
        return error("expected a grid axis name");
      while (pos < text.size() && isNameChar(text[pos]))
        ++pos;
      std::string name = text.slice(start, pos).str();
      if (grid && !grid->axisIndex(name)) {
        std::string known;
        for (const std::string &a : grid->names)
          known += (known.empty() ? "" : ", ") + a;
        pos = start;
        return error("unknown grid axis '" + name +
                     "' (the grid's axes: " + known + ")");
      }
      if (llvm::is_contained(used, name)) {
        pos = start;
        return error("grid axis '" + name +
                     "' splits more than one factor of the tensor");
      }
      used.push_back(name);
      axes.push_back(std::move(name));
      skipBlanks();
    } while (consume('*'));
    return axes;
  }

  /// Checks that the axes of `f` divide its size (with a grid).
  llvm::Error checkDivisible(const LayoutFactor &f, size_t d) const {
    if (!grid || f.axes.empty())
      return llvm::Error::success();
    int64_t ways = 1;
    std::string names;
    for (const std::string &a : f.axes) {
      ways *= grid->axisSize(a);
      names += (names.empty() ? "" : "*") + a;
    }
    if (ways > 0 && f.size % ways == 0)
      return llvm::Error::success();
    return fail("dim " + llvm::Twine(d) + ": " + llvm::Twine(f.size) +
                " is not divisible by " + names + " (" + llvm::Twine(ways) +
                " ranks)");
  }

  /// dim := "-" | axes | "{" factor ("," factor)* "}"
  llvm::Expected<std::vector<LayoutFactor>> parseDim(size_t d) {
    skipBlanks();
    int64_t size = shape[d];
    if (consume('-'))
      return std::vector<LayoutFactor>{{size, {}}};
    if (!consume('{')) {
      if (pos >= text.size() || !isNameStart(text[pos]))
        return error("expected '-', a grid axis name or '{' for dim " +
                     llvm::Twine(d));
      auto axes = parseAxes();
      if (!axes)
        return axes.takeError();
      LayoutFactor f{size, std::move(*axes)};
      if (llvm::Error err = checkDivisible(f, d))
        return std::move(err);
      return std::vector<LayoutFactor>{std::move(f)};
    }
    std::vector<LayoutFactor> factors;
    int64_t product = 1;
    std::string sizes;
    do {
      skipBlanks();
      size_t start = pos;
      while (pos < text.size() && llvm::isDigit(text[pos]))
        ++pos;
      int64_t n = 0;
      if (text.slice(start, pos).getAsInteger(10, n) || n < 1) {
        pos = start;
        return error("expected a sub-factor size (a positive integer)");
      }
      LayoutFactor f{n, {}};
      if (consume(':')) {
        auto axes = parseAxes();
        if (!axes)
          return axes.takeError();
        f.axes = std::move(*axes);
      }
      // Sizes beyond the dim's cannot multiply to it (and would overflow).
      if (n > size || product > size / n)
        product = size + 1;
      else
        product *= n;
      sizes += (sizes.empty() ? "" : " x ") + std::to_string(n);
      factors.push_back(std::move(f));
      skipBlanks();
    } while (consume(','));
    if (!consume('}'))
      return error("expected ',' or '}'");
    if (product != size)
      return fail("dim " + llvm::Twine(d) + ": sub-factors " + sizes +
                  " do not multiply to the dim's size " + llvm::Twine(size) +
                  " (shape " + shapeText(shape) + ")");
    for (const LayoutFactor &f : factors)
      if (llvm::Error err = checkDivisible(f, d))
        return std::move(err);
    return factors;
  }
};

} // namespace

llvm::Expected<TensorLayout> tessera::planner::parseLayoutText(
    llvm::StringRef text, llvm::ArrayRef<int64_t> shape, const GridSpec *grid) {
  return Parser(text, shape, grid).parse();
}

std::string tessera::planner::printLayoutText(const TensorLayout &layout) {
  if (layout.replicated())
    return "replicated";
  std::string text;
  llvm::raw_string_ostream os(text);
  auto axesText = [&](const LayoutFactor &f) {
    llvm::interleave(f.axes, os, "*");
  };
  os << "[";
  llvm::interleaveComma(
      layout.dims, os, [&](const std::vector<LayoutFactor> &dim) {
        if (dim.size() == 1) {
          if (dim.front().axes.empty())
            os << "-";
          else
            axesText(dim.front());
          return;
        }
        os << "{";
        llvm::interleaveComma(dim, os, [&](const LayoutFactor &f) {
          os << f.size;
          if (!f.axes.empty()) {
            os << " : ";
            axesText(f);
          }
        });
        os << "}";
      });
  os << "]";
  return text;
}
