"""Fine-tuning pre-trained BERT on GLUE, SQuAD and SWAG."""
