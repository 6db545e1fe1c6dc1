// attnc-opt: runs attn passes on MLIR files (the mlir-opt of this project, for tests and debugging).
#include "dialects/Attn/IR/AttnDialect.h"
#include "dialects/Attn/Transforms/Passes.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"

int main(int argc, char** argv) {
  mlir::registerCanonicalizerPass();
  mlir::registerCSEPass();
  mlir::attn::registerAttnPasses();
  mlir::DialectRegistry registry;
  registry.insert<mlir::attn::AttnDialect, mlir::arith::ArithDialect, mlir::math::MathDialect>();
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "attnc pass driver: runs attn passes on MLIR\n", registry));
}
