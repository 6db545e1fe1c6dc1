// The attn dialect: attention variants as ops with mask and score regions.
#ifndef ATTN_DIALECT_TD
#define ATTN_DIALECT_TD

include "mlir/IR/OpBase.td"

def Attn_Dialect : Dialect {
  let name = "attn";
  let summary = "Attention variants and their tiled, fused forms.";
  let description = [{
    The `attn` dialect describes one attention variant as a single op whose attributes hold the
    shapes, dtype, scale and dropout, and whose two regions hold the per-element mask (yielding
    `i1`: keep the element) and the score modification (yielding `f32`). Regions are built from
    `arith` and `math` ops plus `attn.load` of declared input tensors, so every pass can reason
    about them and CodeGen can emit them as device functions.
  }];
  let cppNamespace = "::mlir::attn";
  let dependentDialects = ["::mlir::arith::ArithDialect", "::mlir::math::MathDialect"];
}

class Attn_Op<string mnemonic, list<Trait> traits = []> : Op<Attn_Dialect, mnemonic, traits>;

#endif // ATTN_DIALECT_TD
