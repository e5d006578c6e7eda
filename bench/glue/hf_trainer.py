"""The same fine-tuning trial with Hugging Face Trainer (the reference that
bench/glue_lines.py counts against tcc's loop): a causal LM from a local
folder, a text file tokenized and split 90/10, fixed windows, evaluation
every N steps, the trained model saved for from_pretrained.

  python bench/glue/hf_trainer.py MODEL_DIR TOKENIZER_DIR corpus.txt OUT [STEPS]
"""
import sys

import torch
import transformers as Tr

model_dir, tok_dir, text_file, out = sys.argv[1:5]
tok = Tr.AutoTokenizer.from_pretrained(tok_dir)
ids = tok(open(text_file, encoding="utf-8").read())["input_ids"]
split, T = int(len(ids) * 0.9), 256


class Windows(torch.utils.data.Dataset):
    def __init__(self, ids):
        self.ids = ids

    def __len__(self):
        return (len(self.ids) - 1) // T

    def __getitem__(self, i):
        x = torch.tensor(self.ids[i * T:(i + 1) * T])
        return {"input_ids": x, "labels": x}


model = Tr.AutoModelForCausalLM.from_pretrained(model_dir)
steps = int(sys.argv[5]) if len(sys.argv) > 5 else 1000
args = Tr.TrainingArguments(out, per_device_train_batch_size=8, gradient_accumulation_steps=4,
                            max_steps=steps,
                            eval_strategy="steps", eval_steps=100, save_steps=100,
                            learning_rate=1e-3, report_to=[], use_cpu=not torch.cuda.is_available())
trainer = Tr.Trainer(model=model, args=args, train_dataset=Windows(ids[:split]),
                     eval_dataset=Windows(ids[split:]))
trainer.train()
print(trainer.evaluate())
trainer.save_model(out + "/final")
