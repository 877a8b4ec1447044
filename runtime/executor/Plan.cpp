//===- Plan.cpp - loading a plan.tsr artifact -----------------------------===//

#include "runtime/executor/Plan.h"

#include "dialects/tsrt/TsrtDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"

#include <set>

using namespace tessera::runtime;
using namespace tessera::runtime::exec;
namespace json = llvm::json;

static llvm::Error fail(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg);
}

const char *exec::roleName(Role role) {
  switch (role) {
  case Role::Param:
    return "param";
  case Role::Frozen:
    return "frozen";
  case Role::OptState:
    return "opt_state";
  case Role::Tokens:
    return "tokens";
  case Role::Labels:
    return "labels";
  case Role::Loss:
    return "loss";
  }
  return "?";
}

static std::optional<Role> parseRole(llvm::StringRef s) {
  for (Role r : {Role::Param, Role::Frozen, Role::OptState, Role::Tokens,
                 Role::Labels, Role::Loss})
    if (s == roleName(r))
      return r;
  return std::nullopt;
}

static std::optional<DType> parseDType(llvm::StringRef s) {
  for (DType d : {DType::F32, DType::I64, DType::I1})
    if (s == dtypeName(d))
      return d;
  return std::nullopt;
}

/// Reads an array of integers; nullopt if `v` is not one.
static std::optional<std::vector<int64_t>> intList(const json::Value *v) {
  const json::Array *a = v ? v->getAsArray() : nullptr;
  if (!a)
    return std::nullopt;
  std::vector<int64_t> out;
  for (const json::Value &e : *a) {
    std::optional<int64_t> i = e.getAsInteger();
    if (!i)
      return std::nullopt;
    out.push_back(*i);
  }
  return out;
}

int64_t Manifest::numRanks() const {
  int64_t n = 1;
  for (int64_t s : gridShape)
    n *= s;
  return n;
}

std::string Manifest::gridDescription() const {
  std::string s;
  for (size_t i = 0; i < gridAxes.size(); ++i)
    s += (i ? " x " : "") + gridAxes[i] + "=" + std::to_string(gridShape[i]);
  return s;
}

int64_t Manifest::findArgument(llvm::StringRef name, Role role) const {
  for (const ArgumentSpec &a : arguments)
    if (a.role == role && a.name == name)
      return a.index;
  return -1;
}

llvm::Expected<Manifest> Manifest::parse(llvm::StringRef text,
                                         llvm::StringRef source) {
  auto err = [&](const llvm::Twine &msg) {
    return fail(source + ": manifest: " + msg);
  };
  llvm::Expected<json::Value> parsed = json::parse(text);
  if (!parsed)
    return err("invalid JSON: " + llvm::toString(parsed.takeError()));
  const json::Object *root = parsed->getAsObject();
  if (!root)
    return err("expected a JSON object");
  if (root->getString("format") !=
      std::optional<llvm::StringRef>("tessera-plan"))
    return err("\"format\" is not \"tessera-plan\"");
  if (root->getInteger("version") != std::optional<int64_t>(1))
    return err("unsupported \"version\" (this runtime reads version 1)");

  Manifest m;
  const json::Object *grid = root->getObject("grid");
  const json::Array *axes = grid ? grid->getArray("axes") : nullptr;
  auto shape = intList(grid ? grid->get("shape") : nullptr);
  if (!axes || !shape || axes->size() != shape->size() || shape->empty())
    return err("\"grid\" needs \"axes\" (names) and \"shape\" (sizes) of the "
               "same non-zero length");
  for (const json::Value &a : *axes) {
    std::optional<llvm::StringRef> s = a.getAsString();
    if (!s || s->empty())
      return err("grid axis names must be non-empty strings");
    m.gridAxes.push_back(s->str());
  }
  for (int64_t s : *shape)
    if (s < 1)
      return err("grid sizes must be >= 1");
  m.gridShape = *shape;
  if (auto p = root->getString("program"))
    m.program = p->str();
  if (auto f = root->getString("function"))
    m.function = f->str();
  m.globalBatch = root->getInteger("global_batch").value_or(0);
  m.seqLen = root->getInteger("seq_len").value_or(0);
  if (m.globalBatch < 1 || m.seqLen < 1)
    return err("\"global_batch\" and \"seq_len\" must be positive integers");
  if (const json::Object *opt = root->getObject("optimizer"))
    m.optimizer = *opt;

  const json::Array *args = root->getArray("arguments");
  const json::Array *results = root->getArray("results");
  if (!args || !results)
    return err("needs \"arguments\" and \"results\" arrays");
  m.arguments.resize(args->size());
  std::vector<bool> seen(args->size(), false);
  for (const json::Value &v : *args) {
    const json::Object *a = v.getAsObject();
    std::optional<int64_t> index = a ? a->getInteger("index") : std::nullopt;
    if (!index || *index < 0 || *index >= static_cast<int64_t>(args->size()) ||
        seen[*index])
      return err("every argument needs a unique \"index\" in [0, " +
                 llvm::Twine(args->size()) + ")");
    seen[*index] = true;
    ArgumentSpec &spec = m.arguments[*index];
    spec.index = *index;
    std::optional<llvm::StringRef> name = a->getString("name");
    if (!name || name->empty())
      return err(llvm::formatv("argument {0} has no \"name\"", *index));
    spec.name = name->str();
    auto what = [&](const llvm::Twine &msg) {
      return err("argument '" + spec.name + "': " + msg);
    };
    std::optional<Role> role = parseRole(a->getString("role").value_or(""));
    if (!role || *role == Role::Loss)
      return what("unknown \"role\" (expected param, frozen, opt_state, "
                  "tokens or labels)");
    spec.role = *role;
    std::optional<DType> dtype = parseDType(a->getString("dtype").value_or(""));
    if (!dtype)
      return what("unsupported \"dtype\" (expected f32, i64 or i1)");
    spec.dtype = *dtype;
    auto gshape = intList(a->get("shape"));
    auto lshape = intList(a->get("local_shape"));
    const json::Value *layout = a->get("layout");
    if (!gshape || !lshape || !layout)
      return what("needs \"shape\", \"local_shape\" and \"layout\"");
    for (int64_t d : *gshape)
      if (d < 0)
        return what("negative dimension in \"shape\"");
    spec.shape = *gshape;
    spec.localShape = *lshape;
    auto parsedLayout = parseLayout(*layout, m.gridShape, spec.name);
    if (!parsedLayout)
      return err(llvm::toString(parsedLayout.takeError()));
    spec.layout = std::move(*parsedLayout);
    if (spec.layout.globalShape() != spec.shape)
      return what("layout describes global shape " +
                  shapeToString(spec.layout.globalShape()) +
                  " but \"shape\" is " + shapeToString(spec.shape));
    if (spec.layout.localShape(m.gridShape) != spec.localShape)
      return what("layout gives local shape " +
                  shapeToString(spec.layout.localShape(m.gridShape)) +
                  " on this grid but \"local_shape\" is " +
                  shapeToString(spec.localShape));
    if ((spec.role == Role::Param || spec.role == Role::Frozen ||
         spec.role == Role::OptState) &&
        m.findArgument(spec.name, spec.role) >= 0 &&
        m.findArgument(spec.name, spec.role) != spec.index)
      return what("name repeated");
    if (spec.role == Role::Tokens || spec.role == Role::Labels) {
      if (spec.dtype != DType::I64 ||
          spec.shape != std::vector<int64_t>{m.globalBatch, m.seqLen})
        return what(llvm::formatv("{0} must be i64 of global shape [{1}, {2}] "
                                  "(global_batch, seq_len)",
                                  roleName(spec.role), m.globalBatch,
                                  m.seqLen));
    }
  }
  for (Role r : {Role::Tokens, Role::Labels}) {
    int count = 0;
    for (const ArgumentSpec &a : m.arguments)
      count += a.role == r;
    if (count != 1)
      return err(llvm::formatv("needs exactly one \"{0}\" argument, found {1}",
                               roleName(r), count));
  }

  m.results.resize(results->size());
  std::vector<bool> seenResult(results->size(), false);
  int losses = 0;
  for (const json::Value &v : *results) {
    const json::Object *r = v.getAsObject();
    std::optional<int64_t> index = r ? r->getInteger("index") : std::nullopt;
    if (!index || *index < 0 ||
        *index >= static_cast<int64_t>(results->size()) || seenResult[*index])
      return err("every result needs a unique \"index\" in [0, " +
                 llvm::Twine(results->size()) + ")");
    seenResult[*index] = true;
    ResultSpec &spec = m.results[*index];
    spec.index = *index;
    spec.name = r->getString("name").value_or("").str();
    std::optional<Role> role = parseRole(r->getString("role").value_or(""));
    if (!role || (*role != Role::Loss && *role != Role::Param &&
                  *role != Role::OptState))
      return err(llvm::formatv("result {0}: \"role\" must be loss, param or "
                               "opt_state",
                               *index));
    spec.role = *role;
    if (spec.role == Role::Loss) {
      ++losses;
      continue;
    }
    spec.argument = m.findArgument(spec.name, spec.role);
    if (spec.argument < 0)
      return err(llvm::formatv("result {0} ('{1}', {2}) has no argument of "
                               "that name and role",
                               *index, spec.name, roleName(spec.role)));
  }
  if (losses != 1)
    return err(
        llvm::formatv("needs exactly one \"loss\" result, found {0}", losses));
  return m;
}

const Tensor *Plan::initialValue(llvm::StringRef name) const {
  auto it = weights.find(name);
  return it == weights.end() ? nullptr : &it->second;
}

llvm::Expected<std::unique_ptr<Plan>> Plan::load(llvm::StringRef path) {
  llvm::Expected<SafeTensorsFile> file = readSafeTensors(path);
  if (!file)
    return file.takeError(); // names the path
  return fromSafeTensors(std::move(*file), path);
}

/// Parses the program bytes (MLIR bytecode or text) and compiles it.
static llvm::Expected<Program>
loadProgram(const Tensor &bytes, const Manifest &m, llvm::StringRef source) {
  // MLIR bytecode starts with "ML\xefR". A writer that stores the bytes as
  // BOOL normalises them to 0/1 (runtime::writeSafeTensors does for I1
  // tensors), which destroys the program: say so rather than "parse error".
  const auto *head = static_cast<const unsigned char *>(bytes.raw());
  if (bytes.bytes() >= 4 && head[0] == 1 && head[1] == 1 && head[2] == 1 &&
      head[3] == 1)
    return fail(source + ": the program tensor '" + m.program +
                "' holds 0/1 bytes: it was stored as BOOL (normalised) "
                "instead of raw U8 MLIR bytecode");

  mlir::DialectRegistry registry;
  registry.insert<tessera::tsrt::TsrtDialect, mlir::func::FuncDialect>();
  mlir::MLIRContext ctx(registry, mlir::MLIRContext::Threading::DISABLED);
  ctx.loadAllAvailableDialects();
  // Ops and attributes of other dialects (e.g. a `tsr` op the lowering left
  // behind) still parse, so the compile step can name them precisely.
  ctx.allowUnregisteredDialects();
  std::string diagnostics;
  mlir::ScopedDiagnosticHandler handler(&ctx, [&](mlir::Diagnostic &d) {
    if (d.getSeverity() == mlir::DiagnosticSeverity::Error &&
        diagnostics.empty())
      diagnostics = d.str();
    return mlir::success();
  });

  std::string bufferName = (source + ":" + m.program).str();
  llvm::SourceMgr sourceMgr;
  sourceMgr.AddNewSourceBuffer(
      llvm::MemoryBuffer::getMemBuffer(
          llvm::StringRef(static_cast<const char *>(bytes.raw()),
                          bytes.bytes()),
          bufferName, /*RequiresNullTerminator=*/false),
      llvm::SMLoc());
  mlir::ParserConfig config(&ctx);
  mlir::OwningOpRef<mlir::ModuleOp> module =
      mlir::parseSourceFile<mlir::ModuleOp>(sourceMgr, config);
  if (!module)
    return fail(
        source + ": cannot parse the program '" + m.program + "': " +
        (diagnostics.empty() ? std::string("invalid MLIR") : diagnostics));

  CompileOptions options;
  options.gridShape = m.gridShape;
  options.optimizer = &m.optimizer;
  return Program::compile(*module, m.function, options, source);
}

llvm::Expected<std::unique_ptr<Plan>>
Plan::fromSafeTensors(SafeTensorsFile file, llvm::StringRef source) {
  auto it = file.metadata.find("tessera.manifest");
  if (it == file.metadata.end())
    return fail(source + ": not a Tessera plan (no \"tessera.manifest\" "
                         "metadata)");
  llvm::Expected<Manifest> manifest = Manifest::parse(it->second, source);
  if (!manifest)
    return manifest.takeError();

  std::unique_ptr<Plan> plan(new Plan());
  plan->src = source.str();
  plan->man = std::move(*manifest);
  const Manifest &m = plan->man;

  const Tensor *programBytes = file.find(m.program);
  if (!programBytes || programBytes->dtype() != DType::I1 ||
      programBytes->rank() != 1)
    return fail(source + ": no program tensor '" + m.program +
                "' (U8 bytes of MLIR bytecode)");
  llvm::Expected<Program> program = loadProgram(*programBytes, m, source);
  if (!program)
    return program.takeError();
  plan->prog = std::move(*program);
  const Program &p = plan->prog;

  // Manifest against program signature.
  if (p.argTypes().size() != m.arguments.size() ||
      p.resultTypes().size() != m.results.size())
    return fail(llvm::formatv("{0}: @{1} has {2} arguments and {3} results but "
                              "the manifest lists {4} and {5}",
                              source, m.function, p.argTypes().size(),
                              p.resultTypes().size(), m.arguments.size(),
                              m.results.size()));
  for (const ArgumentSpec &a : m.arguments) {
    TensorType expected{a.dtype, a.localShape};
    if (p.argTypes()[a.index] != expected)
      return fail(llvm::formatv("{0}: argument '{1}': the program takes {2} "
                                "but the manifest says {3}",
                                source, a.name, p.argTypes()[a.index].str(),
                                expected.str()));
  }
  for (const ResultSpec &r : m.results) {
    const TensorType &t = p.resultTypes()[r.index];
    if (r.role == Role::Loss) {
      if (t.dtype != DType::F32 || shapeNumel(t.shape) != 1)
        return fail(llvm::formatv("{0}: the loss result is {1}, expected an "
                                  "f32 scalar",
                                  source, t.str()));
    } else if (t != p.argTypes()[r.argument]) {
      return fail(llvm::formatv("{0}: result {1} ('{2}') is {3} but its "
                                "argument is {4}",
                                source, r.index, r.name, t.str(),
                                p.argTypes()[r.argument].str()));
    }
  }

  // Initial weights.
  for (const ArgumentSpec &a : m.arguments) {
    if (a.role != Role::Param && a.role != Role::Frozen)
      continue;
    if (a.dtype != DType::F32)
      return fail(source + ": " + roleName(a.role) + " '" + a.name +
                  "' must be f32");
    const Tensor *t = file.find(a.name);
    if (!t)
      return fail(source + ": no initial value for " + roleName(a.role) + " '" +
                  a.name + "'");
    if (t->dtype() != DType::F32 || t->shape() != a.shape)
      return fail(source + ": initial value of '" + a.name + "' is " +
                  dtypeName(t->dtype()) + " " + shapeToString(t->shape()) +
                  ", expected f32 " + shapeToString(a.shape));
    plan->weights[a.name] = *t;
  }
  return plan;
}
