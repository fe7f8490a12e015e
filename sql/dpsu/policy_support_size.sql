-- Number of distinct items in a policy input (private: sizes the driver's weight array only).
SELECT count(*) FROM {schema}.{item_ids}
