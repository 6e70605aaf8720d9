"""``torch.nn.modules.transformer``'s path: the Transformer layers (defined in ``ctransformer.nn.transformer``).

Checkpoints and ``safe_globals`` lists name classes by this path."""
from ..transformer import (Transformer, TransformerDecoder, TransformerDecoderLayer, TransformerEncoder,
                           TransformerEncoderLayer)

__all__ = ["Transformer", "TransformerEncoder", "TransformerDecoder", "TransformerEncoderLayer",
           "TransformerDecoderLayer"]
